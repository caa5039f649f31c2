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


@pytest.mark.parametrize("verb", [["report", "--out", "r"], ["plot", "breakdown", "--out", "b.png"]])
def test_verbs_that_write_files_refuse_json(verb, tmp_path, monkeypatch, capsys):
    """--json on report and plot was accepted and ignored; now argparse refuses it (exit 2)."""
    from simtrain.cli import main
    monkeypatch.chdir(tmp_path)
    args = [verb[0], *(verb[1:2] if verb[0] == "plot" else []), "--model", "gpt2", "--hardware", "dgx-h100",
            "--nodes", "1", "--json", *verb[-2:]]
    with pytest.raises(SystemExit) as err:
        main(args)
    assert err.value.code == 2 and "--json" in capsys.readouterr().err


def test_an_unknown_config_key_names_the_nearest_field():
    """A config given as a dict (the API's, a job file's, a sweep's): the misspelt key and the field it
    probably meant."""
    from simtrain.inputs import as_config
    with pytest.raises(st.SpecError) as err:
        as_config({"global_batch_size": 8, "micro_batchsize": 2})
    assert "micro_batchsize" in err.value.fields and "did you mean 'micro_batch_size'?" in str(err.value)
