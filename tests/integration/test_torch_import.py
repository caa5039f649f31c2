"""Model.from_torch against PyTorch's own instruments, over the validation zoo.

For every zoo model (tiny sizes): FLOPs by phase equal ``torch.utils.flop_counter.FlopCounterMode``
operator by operator; bytes saved for backward equal what ``saved_tensors_hooks`` observes (within
1%); nothing is unmodelled; per-sample records do not depend on the capture batch; ``param_count``
is the number of unique parameters. Two documented disagreements with the counter are checked
explicitly (docs/flop-counter-disagreements.md):

1. the CPU attention kernel ``_scaled_dot_product_flash_attention_for_cpu`` has no counter formula
   (the counter says 0); the comparison registers the counter's own CUDA-kernel formulas for it;
2. the counter's convolution backward multiplies the weight gradient of a grouped convolution by
   ``groups``; simtrain counts what is computed, and the test checks the difference exactly.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.utils.flop_counter as fc  # noqa: E402

from simtrain.graph.capture.importer import aten_flops  # noqa: E402
from simtrain.graph.model import Model  # noqa: E402
from simtrain.graph.op import Gemm, PhaseCounts, Saved  # noqa: E402

from_torch = Model.from_torch
from validation.zoo import ZOO, build  # noqa: E402

pytestmark = pytest.mark.torch
torch.set_num_threads(1)  # CI has 2 noisy cores and runs 2 workers

aten = torch.ops.aten
# The counter's own formulas for the CUDA kernels, registered for the CPU kernel it lacks.
_CPU_SDPA = {aten._scaled_dot_product_flash_attention_for_cpu: fc.sdpa_flop.__wrapped__,
             aten._scaled_dot_product_flash_attention_for_cpu_backward: fc.sdpa_backward_flop.__wrapped__}
BATCH = 2


def _packet_name(p) -> str:
    return p._qualified_op_name.split("::")[-1]


def counter_flops(module, inputs, loss_fn, mapping=None) -> dict[tuple[str, str], int]:
    """FlopCounterMode totals by (ATen packet, fw | bw) for one training step."""
    out: dict[tuple[str, str], int] = {}
    with torch.random.fork_rng(devices=[]):
        with fc.FlopCounterMode(display=False, custom_mapping=mapping) as fw:
            loss = loss_fn(module(*inputs))
        with fc.FlopCounterMode(display=False, custom_mapping=mapping) as bw:
            loss.backward()
    module.zero_grad(set_to_none=True)
    for phase, mode in (("fw", fw), ("bw", bw)):
        for p, n in mode.get_flop_counts().get("Global", {}).items():
            out[(_packet_name(p), phase)] = n
    return out


def simtrain_flops(model: Model, batch: int) -> dict[tuple[str, str], float]:
    """simtrain's per-sample FLOPs by (ATen packet, fw | bw), scaled back to the captured batch."""
    out: dict[tuple[str, str], float] = {}
    for (name, phase), f in aten_flops(model, batch).items():
        key = (name, "fw" if phase == "fw" else "bw")
        out[key] = out.get(key, 0.0) + f
    return out


def hook_saved_bytes(module, inputs, loss_fn) -> int:
    """Bytes of distinct storages autograd saves (by data_ptr), parameters and buffers excluded."""
    state = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    seen: dict[int, int] = {}
    keep = []

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in state and ptr not in seen:
            seen[ptr] = t.untyped_storage().nbytes()
            keep.append(t)  # keep the storage alive so its address is not reused
        return t
    with torch.random.fork_rng(devices=[]), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(module(*inputs))
    return sum(seen.values())


def simtrain_saved_bytes(model: Model, batch: int) -> float:
    per_batch = sum(float(op.attr("stats_bytes_per_batch", 0.0) or 0.0) for op in model.ops)
    return sum(op.saved.bytes(4.0) for op in model.ops) * batch + per_batch


def _grouped_conv_excess(module, inputs) -> int:
    """(groups − 1) × the weight-gradient FLOPs of every grouped convolution: what the counter adds.
    Weight-gradient FLOPs = forward FLOPs = 2·B·Ho·Wo·Cout·(Cin/groups)·kh·kw (He & Sun 2015 §2)."""
    excess, hooks = [0], []

    def hook(conv, _inp, out):
        if conv.groups > 1:
            b, c_out, ho, wo = out.shape
            fw = 2 * b * ho * wo * c_out * (conv.in_channels // conv.groups) * conv.kernel_size[0] * conv.kernel_size[1]
            excess[0] += (conv.groups - 1) * fw
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        module(*inputs)
    for h in hooks:
        h.remove()
    return excess[0]


@functools.cache
def captured(name: str, batch: int):
    """(module, inputs, loss_fn, model) of a zoo entry, captured once per test process."""
    module, inputs, loss_fn = build(name, batch=batch)
    return module, inputs, loss_fn, from_torch(module, inputs, loss_fn)


@pytest.fixture(params=sorted(ZOO))
def zoo_case(request):
    return (request.param, *captured(request.param, BATCH))


def test_flops_equal_flop_counter(zoo_case):
    name, module, inputs, loss_fn, model = zoo_case
    ref = counter_flops(module, inputs, loss_fn, _CPU_SDPA)
    ours = simtrain_flops(model, BATCH)
    excess = _grouped_conv_excess(module, inputs) if ZOO[name].grouped_conv else 0
    for key, n in ref.items():
        expect = n - excess if key == ("convolution_backward", "bw") else n
        assert ours.get(key, 0.0) == pytest.approx(expect, rel=1e-12), key
    if ZOO[name].grouped_conv:
        assert excess > 0  # the disagreement is real for this model, not vacuous
    # By phase: simtrain's matrix FLOPs (what the counter counts) equal the counter's totals.
    fw_ref = sum(n for (_, ph), n in ref.items() if ph == "fw")
    bw_ref = sum(n for (_, ph), n in ref.items() if ph == "bw") - excess
    assert sum(ours.get(k, 0.0) for k in ref if k[1] == "fw") == pytest.approx(fw_ref, rel=1e-12)
    assert sum(ours.get(k, 0.0) for k in ref if k[1] == "bw") == pytest.approx(bw_ref, rel=1e-12)


def test_stock_counter_misses_cpu_attention():
    """Disagreement 1: without the registered formulas the counter counts CPU attention as 0.
    GPT small: B = 2, 4 heads, 16 tokens, head dim 8, 2 layers; per layer the forward is
    2·B·H·S²·(D + Dv) = 2·2·4·256·16 = 65536 and the backward 2·B·H·S²·(3D + 2Dv) = 163840."""
    module, inputs, loss_fn, model = captured("gpt", BATCH)
    stock = counter_flops(module, inputs, loss_fn)
    ours = simtrain_flops(model, BATCH)
    fw, bw = ("_scaled_dot_product_flash_attention_for_cpu", "fw"), ("_scaled_dot_product_flash_attention_for_cpu_backward", "bw")
    assert (ours[fw], ours[bw]) == (2 * 65536, 2 * 163840)
    assert fw not in stock and bw not in stock
    assert sum(stock.values()) + ours[fw] + ours[bw] == sum(counter_flops(module, inputs, loss_fn, _CPU_SDPA).values())


def test_saved_bytes_match_saved_tensor_hooks(zoo_case):
    _, module, inputs, loss_fn, model = zoo_case
    ref = hook_saved_bytes(module, inputs, loss_fn)
    assert ref > 0
    assert simtrain_saved_bytes(model, BATCH) == pytest.approx(ref, rel=0.01)


def test_nothing_unmodelled_and_params_counted_once(zoo_case):
    _, module, _, _, model = zoo_case
    assert model.unmodelled == ()
    assert model.param_count == sum(p.numel() for p in {id(p): p for p in module.parameters()}.values())
    assert model.meta["capture_batch_size"] == BATCH


def _record(op):
    return (op.flops, op.act_read, op.act_write, op.weight_read, op.weight_write, op.fixed_read_bytes,
            op.fixed_write_bytes, op.saved, op.param_count, op.gemm, op.shapes, op.out_shape)


def _close(a, b) -> bool:
    if isinstance(a, (PhaseCounts, Saved)):
        return all(_close(x, y) for x, y in zip(_flat(a), _flat(b), strict=True))
    if isinstance(a, float):
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1.0)
    return a == b


def _flat(x):
    return (x.fw, x.agrad, x.wgrad) if isinstance(x, PhaseCounts) else (x.act, x.mask, x.fixed_bytes)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_per_sample_records_do_not_depend_on_capture_batch(name):
    a, b = captured(name, 2)[3], captured(name, 4)[3]
    if ZOO[name].data_dependent:  # routing differs with the data: totals are what is invariant
        for phase in ("fw", "agrad", "wgrad"):
            assert a.flops_per_sample(phase) == pytest.approx(b.flops_per_sample(phase), rel=1e-9)
        return
    assert [op.name for op in a.ops] == [op.name for op in b.ops]
    for x, y in zip(a.ops, b.ops, strict=True):
        for fx, fy in zip(_record(x), _record(y), strict=True):
            assert _close(fx, fy), (x.name, fx, fy)


# --- hand-derived records -------------------------------------------------------------------------

def test_linear_relu_records_hand_derived():
    """Linear(4→3) + ReLU, default loss (sum), batch B = 2, fp32. Per sample unless stated.

    linear fw: addmm 2·B·3·4 = 48 FLOPs → 24; reads x (4), W and b (12 + 3, per micro-batch);
      writes 3. backward (x needs no grad, so no agrad): dW = gᵀ·x 48 → 24 and db = Σ g 6 → 3
      FLOPs, wgrad 27; reads gᵀ (3) and x (4) for dW, g (3) for db → 10; writes dW, db (15, per
      micro-batch). Saved: x (8 floats → 4); Wᵀ is a parameter, saved by reference: excluded.
    relu: fw 6 → 3 FLOPs, reads 3, writes 3, saves its output (3); agrad threshold_backward 3 FLOPs,
      reads its saved output (3) and the broadcast seed gradient (one element: per micro-batch),
      writes 3.
    loss sum: 6 → 3 FLOPs, reads 3, writes the scalar (per micro-batch); its backward fills the
      seed gradient (one element).
    """
    torch.manual_seed(0)
    model = from_torch(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), torch.randn(2, 4))
    lin, relu, loss = model.ops
    pc = PhaseCounts
    assert (lin.name, lin.kind, lin.block, lin.param_count) == ("0/linear", "linear", "0", 15)
    assert (lin.flops, lin.act_read, lin.act_write) == (pc(24, 0, 27), pc(4, 0, 10), pc(3, 0, 0))
    assert (lin.weight_read, lin.weight_write, lin.saved) == (pc(15, 0, 0), pc(0, 0, 15), Saved(act=4))
    assert (lin.gemm, lin.shapes, lin.out_shape) == (Gemm(1, 3, 4), ((4,), (3, 4), (3,)), (3,))
    assert (relu.name, relu.flops, relu.act_read, relu.act_write) == ("1/relu", pc(3, 3, 0), pc(3, 3, 0), pc(3, 3, 0))
    assert (relu.weight_read, relu.saved) == (pc(0, 1, 0), Saved(act=3))
    assert (loss.name, loss.block, loss.flops, loss.act_read) == ("loss/sum", "1", pc(3, 0, 0), pc(3, 0, 0))
    assert loss.weight_write == pc(1, 1, 0)
    assert model.blocks == ("0", "1") and list(model.graph.edges) == [("0/linear", "1/relu"), ("1/relu", "loss/sum")]


def test_grouped_conv_counter_disagreement_hand_derived():
    """Disagreement 2 on one layer: Conv2d(4→4, 3×3, groups=2, padding 1) on 2×4×5×5, after a
    1×1 conv so its input needs a gradient. MACs = B·Ho·Wo·Cout·(Cin/g)·kh·kw = 2·25·4·2·9 = 3600.
    simtrain: fw = agrad = wgrad = 7200 FLOPs (3600 per sample). FlopCounterMode's backward:
    grad_input 7200 plus grad_weight computed as a conv over transposed shapes without groups,
    2·kh·kw·Ho·Wo·Cin·Cout·B = 14400 = groups × 7200: total 21600 instead of 14400."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(4, 4, 1, bias=False), nn.Conv2d(4, 4, 3, padding=1, groups=2, bias=False))
    x = torch.randn(2, 4, 5, 5)
    model = from_torch(net, x)
    grouped = next(op for op in model.ops if op.name == "1/conv2d")
    assert grouped.flops == PhaseCounts(3600, 3600, 3600)
    assert grouped.gemm == Gemm(25, 2, 18, 2)  # m = Ho·Wo, n = Cout/g, k = Cin/g·kh·kw, batch = g
    ref = counter_flops(net, (x,), lambda out: out.sum())
    pointwise_bw = 2 * 2 * 25 * 4 * 4  # the 1×1 conv: wgrad only (its input needs no grad)
    assert ref[("convolution_backward", "bw")] == 21600 + pointwise_bw
    assert simtrain_flops(model, 2)[("convolution_backward", "bw")] == 14400 + pointwise_bw


def test_attention_facts():
    for name, causal in (("gpt", True), ("bert", False)):
        module, inputs, loss_fn = build(name)
        att = [op for op in from_torch(module, inputs, loss_fn).ops if op.attention is not None]
        assert len(att) == 2 and all(op.op_class.value == "attention" for op in att)
        info = att[0].attention
        assert (info.heads, info.kv_heads, info.head_dim, info.seq_q, info.seq_kv) == (4, 4, 8, 16, 16)
        assert (info.causal, info.fused) == (causal, True)
        assert att[0].gemm == Gemm(16, 16, 8, 4)


def test_blocks_tied_weights_and_graph():
    module, inputs, loss_fn = build("gpt")
    model = from_torch(module, inputs, loss_fn)
    assert model.blocks == ("tok", "pos", "drop", "layers.0", "layers.1", "ln_f", "head")
    head = next(op for op in model.ops if op.name == "head/linear")
    assert head.param_count == 0  # tied to tok.weight, counted on the embedding
    assert model.seq_len == 16 and model.ops[-1].name == "loss/cross_entropy"
    import networkx as nx
    assert nx.is_directed_acyclic_graph(model.graph)
    assert ("layers.0/attn/qkv/linear", "layers.0/attn/split") in model.graph.edges
    deeper = from_torch(module, inputs, loss_fn, block_depth=2)
    assert "layers.0/attn" in deeper.blocks and "layers.0/mlp" in deeper.blocks


# --- unmodelled, fake tensors, state, bad input ---------------------------------------------------

class _Spectral(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.fft.rfft(self.lin(x)).abs()


def test_unmodelled_ops_are_listed_not_dropped():
    torch.manual_seed(0)
    model = from_torch(_Spectral(), torch.randn(3, 8))
    names = {(u.name, u.phase): u for u in model.unmodelled}
    fw = names[("aten._fft_r2c.default", "fw")]
    assert fw.count == 1 and fw.example_shapes == ((3, 8),)
    assert any(u.phase == "agrad" for u in model.unmodelled)
    df = model.summary()
    line = df[df["name"] == "UNMODELLED"]
    assert len(line) == 1 and "aten._fft_r2c.default" in line["kind"].iloc[0]
    assert model.param_count == 72


def test_fake_capture_matches_real_and_meta_modules_work():
    module, inputs, loss_fn = build("gpt")
    real = from_torch(module, inputs, loss_fn)
    fake = from_torch(module, inputs, loss_fn, fake=True)
    assert fake.meta["capture"] == "fake"
    assert [(o.name, o.flops, o.act_read, o.saved) for o in real.ops] == \
        [(o.name, o.flops, o.act_read, o.saved) for o in fake.ops]
    from validation.zoo import _TF, GPT
    with torch.device("meta"):
        meta_module = GPT(_TF["small"])
    on_meta = from_torch(meta_module, inputs, loss_fn)
    assert on_meta.meta["capture"] == "fake"
    assert on_meta.phase_flops() == real.phase_flops() and on_meta.param_count == real.param_count


def test_fake_capture_of_data_dependent_routing_says_why():
    from simtrain.errors import SpecError
    module, inputs, loss_fn = build("moe")
    with pytest.raises(SpecError) as err:
        from_torch(module, inputs, loss_fn, fake=True)
    assert err.value.fields == ["example_inputs"] and "fake=False" in str(err.value)


def test_capture_leaves_the_module_as_it_was():
    module, inputs, loss_fn = build("cnn_bn")
    before = {k: v.clone() for k, v in module.state_dict().items()}
    for p in module.parameters():
        p.grad = torch.ones_like(p)
    from_torch(module, inputs, loss_fn)
    after = module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in module.parameters())


def test_bad_inputs_raise_spec_errors():
    from simtrain.errors import SpecError
    lin = nn.Linear(2, 2)
    cases = [(dict(example_inputs=torch.randn(2, 2), block_depth=0), "block_depth"),
             (dict(example_inputs=(3,)), "example_inputs"),
             (dict(example_inputs=torch.randn(2, 2), loss_fn=lambda out: out), "loss_fn")]
    for kwargs, field in cases:
        with pytest.raises(SpecError) as err:
            from_torch(lin, **kwargs)
        assert err.value.fields == [field]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("groups", [1, 2, 4])
def test_counter_weight_gradient_excess_is_groups_minus_one(transposed, groups):
    """Over normal and transposed convolutions: forward and grad-input agree with the counter; the
    counter's grad-weight is ``groups`` × simtrain's (= forward MACs × 2), so the backward differs
    by exactly (groups − 1) × the forward FLOPs of the grouped layer."""
    torch.manual_seed(0)
    conv = (nn.ConvTranspose2d(4, 8, 3, stride=2, groups=groups, bias=False) if transposed
            else nn.Conv2d(4, 8, 3, groups=groups, bias=False))
    net = nn.Sequential(nn.Conv2d(4, 4, 1, bias=False), conv)
    x = torch.randn(2, 4, 6, 6)
    ours = simtrain_flops(from_torch(net, x), 2)
    ref = counter_flops(net, (x,), lambda out: out.sum())
    layer_fw = ref[("convolution", "fw")] - 2 * 2 * 36 * 4 * 4  # minus the 1×1 conv's forward
    assert ours[("convolution", "fw")] == ref[("convolution", "fw")]
    assert ref[("convolution_backward", "bw")] - ours[("convolution_backward", "bw")] == (groups - 1) * layer_fw


@pytest.mark.parametrize("name, published", [
    ("resnet18", 11_689_512),   # torchvision resnet18 (He et al. 2016)
    ("mobilenet", 4_231_976),   # MobileNet v1 1.0-224 (Howard et al. 2017, Table 8: 4.2 M)
    ("vit", 86_567_656),        # ViT-B/16 (Dosovitskiy et al. 2021, Table 1: 86 M)
    ("gpt", 124_439_808),       # GPT-2 small, tied embeddings (Radford et al. 2019: 124 M)
])
def test_standard_sizes_capture_on_meta_with_published_parameter_counts(name, published):
    """The zoo's standard sizes, built on the meta device and captured with fake tensors (no
    memory, no arithmetic): every parameter counted once, tied ones included."""
    entry = ZOO[name]
    with torch.device("meta"):
        module = entry.make("standard")
    inputs, loss_fn = entry.make_batch("standard", 1, 0)
    model = from_torch(module, inputs, loss_fn)
    assert model.meta["capture"] == "fake" and model.unmodelled == ()
    assert model.param_count == published
