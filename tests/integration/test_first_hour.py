"""Issue 40's small walls of the first hour: enum flags list their choices, the flag a report row
recommends exists, and a verb whose optional package is missing says what to install."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simtrain.cli import main

JOB = ["--model", "gpt2", "--hardware", "dgx-h100", "--nodes", "1", "--global-batch-size", "8", "--seq-len", "512"]


@pytest.mark.parametrize("flag, listed", [("--recompute", "'none', 'selective', 'full', 'selective-op'"),
                                          ("--precision", "'bf16'"), ("--pipeline-schedule", "'interleaved-1f1b'"),
                                          ("--optimizer", "'adamw'")])
def test_enum_flags_list_their_choices(flag, listed, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["estimate", *JOB, flag, "nonsense"])
    assert stop.value.code == 2 and listed in capsys.readouterr().err


def test_emulate_precision_has_a_flag(capsys):
    assert main(["estimate", "--model", "gpt2", "--hardware", "a100-sxm4-80gb", "--precision", "fp8",
                 "--emulate-precision", "--global-batch-size", "8", "--seq-len", "512", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["feasible"] and any("emulat" in w for w in report["warnings"])


def test_a_missing_optional_package_is_an_install_hint_not_a_traceback():
    code = ("import sys; sys.modules['torch'] = None; from simtrain.cli import main; "
            "sys.exit(main(['calibrate', '--device', 'cpu', '--quick', '--out', 'never-written.yaml']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "needs the optional package 'torch': pip install 'simtrain[torch]'" in proc.stderr


def test_a_framework_config_is_estimated_as_given(capsys):
    megatron = ("--tensor-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 128 --seq-length 8192 --bf16 "
                "--use-distributed-optimizer --overlap-grad-reduce --sequence-parallel --num-layers 40 --foo 3")
    assert main(["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--nodes", "1", "--from", "megatron",
                 megatron, "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["layout"]["tp"] == 2 and report["layout"]["dp"] == 4 and report["stack"] == "megatron-core"
    assert report["chosen_layout"] is None
    assert "num_layers=40 but the model has layers=32" in captured.err and "ignored: --foo" in captured.err
    assert main(["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--from", "megatorn", "x"]) == 2
    assert "did you mean 'megatron'" in capsys.readouterr().err


def test_trainconfig_reads_the_three_frameworks():
    import simtrain as st
    assert st.TrainConfig.from_megatron("--tensor-model-parallel-size 4 --micro-batch-size 1 --global-batch-size 64 "
                                        "--bf16").tp == 4
    titan = st.TrainConfig.from_torchtitan("tests/fixtures/frameworks/llama3_8b.toml")
    assert titan.stack.name.startswith("fsdp2")
    ds = st.TrainConfig.from_deepspeed({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                        "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}, world_size=8)
    assert ds.zero_stage == 3 and ds.micro_batch_size == 2 and ds.global_batch_size == 64


@pytest.mark.parametrize("argv, words", [
    (["--model", "llama3-70b", "--hardware", "dgx-h100", "--nodes", "1", "--tp", "8", "--global-batch-size", "8"],
     "what to change: shard the optimizer state: zero_stage 1 or more"),
    (["--model", "llama3-8b", "--hardware", "dgx-h100", "--nodes", "1", "--tp", "3"],
     "what to change: a layout whose degrees divide the devices"),
])
def test_every_infeasible_says_what_to_change(argv, words, capsys):
    assert main(["estimate", *argv]) == 1
    assert words in capsys.readouterr().out
