"""Device efficiency profiles derived from component measurements only (components.md).

* :mod:`validation.components.data`: the measured points (GEMM, fused attention, HBM streaming,
  NCCL all-reduce), each with its components.md row, source key and mark;
* :mod:`validation.components.model`: what simtrain's own cost functions predict for each point;
* :mod:`validation.components.derive`: the fits (``python -m validation.components.derive``) and the
  ``efficiency:`` blocks written into ``hardware_specs/devices/*.yaml``;
* :mod:`validation.components.plots`: modelled curves against the data (docs/devices/*.png).
"""
