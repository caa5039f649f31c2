"""The project's published reference cases (its calibration set): Narayanan et al. 2021 Table 1 and
Korthikanti et al. 2022 Table 5, as data, with a runner and the A100 efficiency fit."""
