"""The validation suite: reference PyTorch models (:mod:`validation.zoo`), published reference
cases (:mod:`validation.published`), and runs that compare simtrain's predictions with them."""
