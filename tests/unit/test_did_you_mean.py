"""A misspelt library name (model, cluster, device, stack) says which name it probably meant, and still
lists the known ones (issue 40 item 2, the library-name part)."""

import pytest

import simtrain as st


@pytest.mark.parametrize("load, typo, meant", [
    (st.load_model, "lama3-8b", "llama3-8b"),
    (st.load_cluster, "dgx-h10", "dgx-h100"),
    (st.load_device, "h100-sxm5-80g", "h100-sxm5-80gb"),
    (st.load_stack, "megatron-cor", "megatron-core"),
])
def test_the_nearest_name_is_suggested(load, typo, meant):
    with pytest.raises(st.SpecError) as err:
        load(typo)
    text = str(err.value)
    assert f"did you mean {meant!r}?" in text
    assert ("known:" in text) or ("presets:" in text)


def test_no_suggestion_when_nothing_is_near():
    with pytest.raises(st.SpecError) as err:
        st.load_model("zzzzzz")
    assert "did you mean" not in str(err.value) and "known:" in str(err.value)


def test_compare_with_a_misspelt_name_is_a_cannot_run_row_with_a_suggestion(capsys):
    """`simtrain compare` with a misspelt hardware name: no traceback (it was pandas' NA in a boolean
    test), a "cannot run" row, the reason with the nearest name."""
    from simtrain.cli import main
    assert main(["compare", "gpt2", "dgx-h100", "tpu-v5p-pdo", "--seq-len", "1024", "--global-batch-size", "32"]) == 0
    out = capsys.readouterr().out
    assert "cannot run" in out and "did you mean 'tpu-v5p-pod'?" in out
