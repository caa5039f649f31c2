"""``st.measure(colocated=N)``: the compute benches run beside N − 1 neighbour processes running the
same benches (the ranks of a multi-process job sharing one host); the neighbours stop with the block."""

from __future__ import annotations

import os

import pytest

from simtrain.errors import SpecError

pytest.importorskip("torch")


@pytest.mark.parametrize("bad", [0, True, "2", 2.0, (os.cpu_count() or 1) + 1])
def test_bad_colocated_names_the_field(bad):
    from simtrain.calibrate.measure import measure
    with pytest.raises(SpecError, match="colocated"):
        measure("cpu", grid="tiny", only=["gemm"], collectives=False, colocated=bad)


def test_only_the_cpu_shares_a_host():
    from simtrain.calibrate.measure import measure
    with pytest.raises(SpecError, match="colocated.*only on the CPU"):
        measure("cuda", grid="tiny", only=["gemm"], collectives=False, colocated=2)


def test_neighbours_run_inside_the_block_and_are_gone_after_it():
    from simtrain.calibrate.measure import neighbours
    with neighbours(1, "cpu", "tiny", ["gemm"], 1) as procs:
        assert len(procs) == 1 and procs[0].poll() is None  # started, still benchmarking
    assert procs[0].returncode is not None  # killed and waited for
    with neighbours(0, "cpu", "tiny", ["gemm"], 1) as none:  # alone: nothing started
        assert none == []


def test_a_neighbour_without_its_arguments_says_how_to_call_it(capsys):
    from simtrain.calibrate.measure import neighbour_main as main
    assert main(["cpu"]) == 2 and "usage" in capsys.readouterr().err


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a neighbour needs a second core")
def test_the_measurement_records_its_neighbours():
    from simtrain.calibrate.measure import measure
    m = measure("cpu", grid="tiny", only=["gemm"], collectives=False, threads=1, colocated=2)
    assert m.settings["colocated"] == 2 and m.rows
