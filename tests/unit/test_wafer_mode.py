"""Wafer-scale: the report states weight streaming vs on-wafer fit and why (hardware.md §7)."""

import simtrain as st
from simtrain.report.sanity import accelerator_notes

CFG = dict(global_batch_size=64, micro_batch_size=8, seq_len=1024, recompute="full")


def _note(r):
    return next(w for w in r.warnings if "weight-streaming" in w)


def test_small_model_streams_but_would_fit_on_wafer():
    r = st.estimate("gpt2-xl", st.load_cluster("cs-3-cluster", nodes=1), CFG)
    note = _note(r)
    state_gb = r.memory.external_bytes / 1e9  # 16 B/param: bf16 weights + grads, fp32 accum, master, Adam
    assert f"({state_gb:.1f} GB) live in memoryx" in note
    assert "would fit on the wafer" in note and "upper bound" in note


def test_large_model_must_stream():
    r = st.estimate("llama2-70b", st.load_cluster("cs-3-cluster", nodes=1), dict(CFG, seq_len=2048, micro_batch_size=1))
    assert "exceed the" in _note(r)


def test_other_devices_get_no_accelerator_note():
    r = st.estimate("gpt2", "h100-sxm5-80gb", dict(global_batch_size=8, micro_batch_size=1, seq_len=128))
    assert accelerator_notes(r, st.load_device("h100-sxm5-80gb")) == ()
