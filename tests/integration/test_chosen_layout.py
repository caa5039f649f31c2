"""Issue 40: a command that names a model and hardware and nothing else answers — the fastest layout
that fits, on the smallest node count of the named cluster, printed and marked as chosen."""

from __future__ import annotations

import json

import pytest

import simtrain as st
from simtrain.cli import main
from simtrain.search.choose import choose_layout


def test_the_first_command_a_user_types_answers(capsys):
    assert main(["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("layout chosen by simtrain: 1 node × 8 h100-sxm5-80gb") and "that fit" in first
    assert "(8 × h100-sxm5-80gb)" in out and "INFEASIBLE" not in out


def test_plot_picks_a_layout_too_and_labels_a_long_step_in_seconds(capsys, tmp_path):
    out = tmp_path / "b.png"
    assert main(["plot", "breakdown", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("layout chosen by simtrain: 1 node × 8") and out.stat().st_size > 0
    from simtrain.report import plot
    report = st.estimate("llama3-8b", st.load_cluster("dgx-h100", nodes=1), {"global_batch_size": 128})
    fig = plot.breakdown(report)
    title, xlabel = fig.axes[0].get_title(), fig.axes[0].get_xlabel()
    assert report.step_time_s > 1 and title.startswith("step time ") and " s: " in title and "e+" not in title
    assert xlabel == "seconds per step"


def test_json_marks_the_chosen_layout_and_a_given_layout_is_kept(capsys):
    assert main(["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--json"]) == 0
    chosen = json.loads(capsys.readouterr().out)["chosen_layout"]
    assert chosen["nodes"] == 1 and chosen["tp"] * chosen["pp"] * chosen["dp"] == 8
    main(["estimate", "--model", "gpt2", "--hardware", "dgx-a100-80gb", "--nodes", "2", "--tp", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["chosen_layout"] is None and report["layout"]["tp"] == 2 and report["layout"]["dp"] == 8


def test_a_model_too_big_for_one_node_gets_the_smallest_cluster_that_fits():
    model, cluster = st.load_model("llama3-70b"), st.load_cluster("dgx-h100")
    cfg = st.TrainConfig(global_batch_size=64, seq_len=4096, zero_stage=0)
    chosen = choose_layout(model, cluster, cfg, size_nodes=True)
    assert chosen.fields["nodes"] > 1 and chosen.cfg.zero_stage == 0  # the user's setting is kept
    r = st.estimate(model, chosen.cluster, chosen.cfg)
    assert r.feasible
    smaller = cluster.with_nodes(chosen.fields["nodes"] // 2)
    assert choose_layout(model, smaller, cfg) is None  # nothing fits on half of it


def test_the_chosen_layout_is_the_fastest_that_fits_on_its_nodes():
    model, cluster = st.load_model("gpt2-medium"), st.load_cluster("dgx-a100-80gb", nodes=1)
    cfg = st.TrainConfig(global_batch_size=32, seq_len=1024)
    chosen = choose_layout(model, cluster, cfg)
    best = st.estimate(model, cluster, chosen.cfg).step_time_s
    for tp, pp, mb in ((1, 1, 1), (2, 1, 2), (1, 2, 4), (8, 1, 4), (1, 1, 4)):
        other = st.estimate(model, cluster, cfg.model_copy(update={"tp": tp, "pp": pp, "micro_batch_size": mb}))
        assert not other.feasible or other.step_time_s >= best * (1 - 1e-12)


@pytest.mark.parametrize("kwargs, words", [
    ({"global_batch_size": 8, "micro_batchsize": 1}, "micro_batchsize: unknown key (not a field of this spec); "
                                                     "did you mean 'micro_batch_size'?"),
    ({"global_batch_size": 8, "tp": 0}, "tp: Input should be greater than or equal to 1"),
    ({"tp": 2}, "global_batch_size: Field required"),
])
def test_a_bad_config_built_directly_is_a_spec_error_naming_the_field(kwargs, words):
    with pytest.raises(st.SpecError) as err:
        st.TrainConfig(**kwargs)
    assert words in str(err.value) and "pydantic" not in str(err.value)


def test_deepseek_v3_on_a_gb200_nvl72_rack_answers(capsys):
    assert main(["estimate", "--model", "deepseek-v3", "--hardware", "gb200-nvl72", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    chosen = report["chosen_layout"]
    assert report["feasible"] and report["step_time_s"] > 0 and chosen["nodes"] >= 1
    assert chosen["tp"] * chosen["pp"] * chosen["dp"] * chosen["cp"] == 72 * chosen["nodes"]


def test_without_a_batch_a_chosen_layout_gets_about_a_million_tokens_a_step(capsys):
    assert main(["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--seq-len", "4096"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "global batch 256" in first and "~1M tokens a step by default" in first  # 2**20 / 4096
    # a tiny sequence is capped at 4,096 samples (2**20 one-token samples made the search walk a pipeline
    # of a million micro-batches: 155 s and 2.7 GB, found by the fuzz test)
    assert main(["estimate", "--model", "gpt2", "--hardware", "dgx-h100", "--seq-len", "8"]) == 0
    assert "global batch 4096" in capsys.readouterr().out.splitlines()[0]
    assert main(["estimate", "--model", "llama3-8b", "--hardware", "dgx-h100", "--global-batch-size", "16"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "global batch 16" in first and "by default" not in first
