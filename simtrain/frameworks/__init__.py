"""Framework configs in: a Megatron-LM / NeMo argument list, a torchtitan job TOML or a DeepSpeed
config JSON read into simtrain's terms (a TrainConfig, a stack preset, the model-shape settings found,
and what was ignored or defaulted). One module per framework; each carries its mapping table as data
(``MEGATRON_SETTINGS``, ``TORCHTITAN_SETTINGS``, ``DEEPSPEED_SETTINGS``) and names the framework
commit it was read from. docs/frameworks.md prints the tables and the round trips of example configs.

    imp = from_megatron("--tensor-model-parallel-size 8 --micro-batch-size 1 --global-batch-size 512 --bf16")
    cfg = imp.train_config()                      # a TrainConfig with stack="megatron-core"
"""

from simtrain.frameworks.base import Imported, Setting, mapping_markdown
from simtrain.frameworks.deepspeed import DEEPSPEED_SETTINGS, from_deepspeed
from simtrain.frameworks.megatron import MEGATRON_MODEL, MEGATRON_SETTINGS, from_megatron
from simtrain.frameworks.torchtitan import TORCHTITAN_SETTINGS, from_torchtitan

__all__ = ["Imported", "Setting", "from_megatron", "from_torchtitan", "from_deepspeed", "MEGATRON_SETTINGS",
           "MEGATRON_MODEL", "TORCHTITAN_SETTINGS", "DEEPSPEED_SETTINGS", "mapping_markdown"]
