"""CPU tests of the ssmjit package: it imports without a GPU, argument errors name the argument,
errors from C++ arrive as ssmjit.Error, and every custom op has a fake implementation (meta
tensors give the outputs' and gradients' shapes and dtypes, through autograd)."""
import pytest
import torch

from torch.fx.experimental.proxy_tensor import make_fx

import ssmjit
import ssmjit.torch as st
from blocks import Mamba1Block, Mamba2Block
from ssmjit import _ssmjit

META = torch.device("meta")
OPS = ["causal_conv1d_fwd", "causal_conv1d_bwd", "causal_conv1d_update", "causal_conv1d_slots",
       "selective_scan_fwd", "selective_scan_bwd", "selective_scan_slots", "ssd_fwd", "ssd_bwd",
       "ssd_slots", "selective_state_update", "mamba2_decode_step"]


def meta(*shape, dtype=torch.float32, grad=False):
    return torch.empty(*shape, dtype=dtype, device=META, requires_grad=grad)


def test_imports_and_registers_every_op():
    assert issubclass(ssmjit.Error, ValueError)
    assert st.Error is ssmjit.Error
    for name in OPS:
        assert hasattr(torch.ops.ssmjit, name), name


def test_cpp_error_arrives_with_its_message_and_kind():
    x = torch.randn(1, 4, 8)
    w = torch.randn(4, 4)
    with pytest.raises(ssmjit.Error) as e:
        st.causal_conv1d_fn(x, w)  # host tensors: the op wants them on a CUDA device
    assert e.value.kind == "InvalidArgument"
    assert "causal_conv1d" in str(e.value) and "CUDA" in str(e.value)


def test_unknown_field_is_refused_by_name():
    with pytest.raises(ssmjit.Error, match="unknown argument.*bogus"):
        _ssmjit.causal_conv1d({"bogus": 1}, 0)


def test_bad_dtype_named():
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    with pytest.raises(ssmjit.Error, match="causal_conv1d: x.*float64"):
        st.causal_conv1d_fn(x, torch.randn(4, 4))


@pytest.mark.parametrize("call, names", [
    (lambda: st.causal_conv1d_update(meta(2, 8), meta(2, 8, 3), meta(8, 4),
                                     cache_seqlens=meta(2, dtype=torch.int32)), ["cache_seqlens"]),
    (lambda: st.causal_conv1d_update(meta(2, 8), meta(2, 8, 5), meta(8, 4)),
     ["conv_state", "state_len 5", "width - 1 = 3"]),
    (lambda: st.causal_conv1d_fn(meta(2, 8, 16), meta(8, 4), seq_idx=meta(2, 16, dtype=torch.int32)),
     ["seq_idx", "batch 1"]),
    (lambda: st.causal_conv1d_fn(meta(1, 8, 16), meta(8, 4), seq_idx=meta(1, 16, dtype=torch.int32),
                                 return_final_states=True), ["seq_idx", "return_final_states"]),
    (lambda: st.mamba_chunk_scan_combined(*_ssd_inputs(), 64, state_dtype=torch.float32),
     ["state_dtype"]),
    (lambda: st.mamba_chunk_scan_combined(*_ssd_inputs(), 32), ["chunk_size is 32"]),
    (lambda: st.mamba_chunk_scan_combined(*_ssd_inputs(), 64, seq_idx=meta(1, 16, dtype=torch.int32)),
     ["seq_idx", "cu_seqlens"]),
    (lambda: st.mamba_chunk_scan_combined(*_ssd_inputs(), 64, return_varlen_states=True),
     ["return_varlen_states", "cu_seqlens"]),
    (lambda: st.selective_state_update(meta(2, 4, 8, 16), meta(2, 4, 8), meta(2, 4, 8), meta(4),
                                       meta(2, 1, 16), meta(2, 1, 16)), ["dt", "per head"]),
    (lambda: st.selective_state_update_tokens(meta(2, 4, 8, 16), meta(2, 3, 4, 8), meta(2, 3, 4),
                                              meta(4), meta(2, 3, 1, 16), meta(2, 3, 1, 16),
                                              state_write="all"), ["state_write", "'all'"]),
    (lambda: st.mamba2_decode_step(*[meta(1)] * 8, parts="both"), ["parts", "'both'"]),
])
def test_unsupported_arguments_are_named(call, names):
    with pytest.raises(ssmjit.Error) as e:
        call()
    for name in names:
        assert name in str(e.value)


def test_unknown_activation():
    with pytest.raises(NotImplementedError, match="activation"):
        st.causal_conv1d_fn(meta(1, 8, 16), meta(8, 4), activation="relu")


def _ssd_inputs(b=1, L=16, H=4, P=8, G=1, N=16, grad=False):
    return (meta(b, L, H, P, grad=grad), meta(b, L, H, grad=grad), meta(H, grad=grad),
            meta(b, L, G, N, grad=grad), meta(b, L, G, N, grad=grad))


def _grads(inputs):
    return [t.grad for t in inputs]


def test_conv_fake_shapes_and_autograd():
    x, w, b = meta(2, 8, 16, dtype=torch.bfloat16, grad=True), meta(8, 4, grad=True), meta(8, grad=True)
    init = meta(2, 8, 3, grad=True)
    out, final = st.causal_conv1d_fn(x, w, b, initial_states=init, return_final_states=True,
                                     activation="silu")
    assert out.shape == x.shape and out.dtype == torch.bfloat16
    assert final.shape == (2, 8, 3)
    (out.float().sum() + final.float().sum()).backward()
    for t in (x, w, b, init):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype


def test_conv_varlen_and_update_fake_shapes():
    x = meta(1, 8, 20)
    cu = meta(4, dtype=torch.int32)
    out, final = st.causal_conv1d_varlen(x, meta(8, 4), cu, return_final_states=True)
    assert out.shape == x.shape and final.shape == (3, 8, 3)
    out = st.causal_conv1d_update(meta(5, 8, 2), meta(9, 8, 3), meta(8, 4),
                                  conv_state_indices=meta(5, dtype=torch.int32))
    assert out.shape == (5, 8, 2)
    assert st.causal_conv1d_update(meta(5, 8), meta(5, 8, 3), meta(8, 4)).shape == (5, 8)
    assert st.causal_conv1d_slots(x, meta(8, 4), meta(6, 8, 3), cu_seqlens=cu).shape == x.shape


@pytest.mark.parametrize("varying_BC", [True, False])
def test_scan_fake_shapes_and_autograd(varying_BC):
    u = meta(2, 8, 16, dtype=torch.bfloat16, grad=True)
    delta = meta(2, 8, 16, dtype=torch.bfloat16, grad=True)
    A, D, bias = meta(8, 4, grad=True), meta(8, grad=True), meta(8, grad=True)
    B = meta(2, 4, 16, grad=True) if varying_BC else meta(8, 4, grad=True)
    C = meta(2, 2, 4, 16, grad=True) if varying_BC else meta(8, 4, grad=True)
    z = meta(2, 8, 16, dtype=torch.bfloat16, grad=True)
    out, last = st.selective_scan_fn(u, delta, A, B, C, D, z, bias, True, return_last_state=True)
    assert out.shape == u.shape and out.dtype == u.dtype
    assert last.shape == (2, 8, 4) and last.dtype == torch.float32
    (out.float().sum() + last.sum()).backward()
    for t in (u, delta, A, B, C, D, z, bias):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype


def test_scan_packed_and_slots_fake_shapes():
    u = meta(1, 8, 30, grad=True)
    cu = meta(5, dtype=torch.int32)
    init = meta(4, 8, 4, grad=True)
    out, final = st.selective_scan_packed(u, meta(1, 8, 30), meta(8, 4), meta(1, 1, 4, 30),
                                          meta(1, 1, 4, 30), cu, initial_states=init,
                                          return_final_states=True)
    assert out.shape == u.shape and final.shape == (4, 8, 4)
    (out.sum() + final.sum()).backward()
    assert init.grad.shape == init.shape
    out = st.selective_scan_slots(u.detach(), meta(1, 8, 30), meta(8, 4), meta(1, 1, 4, 30),
                                  meta(1, 1, 4, 30), meta(7, 8, 4), cu_seqlens=cu)
    assert out.shape == u.shape


def test_ssd_fake_shapes_and_autograd():
    x, dt, A, B, C = _ssd_inputs(b=2, G=2, grad=True)
    D, z, dt_bias = meta(4, 8, grad=True), meta(2, 16, 4, 8, grad=True), meta(4, grad=True)
    init = meta(2, 4, 8, 16, grad=True)
    out, final = st.mamba_chunk_scan_combined(x, dt, A, B, C, 64, D, z, dt_bias, init,
                                              dt_softplus=True, return_final_states=True)
    assert out.shape == x.shape and final.shape == (2, 4, 8, 16)
    (out.sum() + final.sum()).backward()
    for t in (x, dt, A, B, C, D, z, dt_bias, init):
        assert t.grad.shape == t.shape


def test_ssd_packed_varlen_states_fake_shapes():
    x, dt, A, B, C = _ssd_inputs()
    cu = meta(4, dtype=torch.int32)
    out, final, varlen = st.mamba_chunk_scan_combined(
        x, dt, A, B, C, 64, seq_idx=meta(1, 16, dtype=torch.int32), cu_seqlens=cu,
        return_final_states=True, return_varlen_states=True)
    assert out.shape == x.shape and final.shape == (1, 4, 8, 16) and varlen.shape == (3, 4, 8, 16)
    assert st.ssd_slots(x, dt, A, B, C, meta(5, 4, 8, 16), 64, cu_seqlens=cu).shape == x.shape


def test_state_update_fake_shapes_mamba2_broadcast():
    H, P, N = 4, 8, 16
    dt = meta(3, H).unsqueeze(-1).expand(3, H, P)
    A = meta(H)[:, None, None].expand(H, P, N)
    D = meta(H)[:, None].expand(H, P)
    out = st.selective_state_update(meta(5, H, P, N), meta(3, H, P), dt, A, meta(3, 2, N),
                                    meta(3, 2, N), D, meta(3, H, P), D, True,
                                    meta(3, dtype=torch.int32))
    assert out.shape == (3, H, P)
    out = st.selective_state_update_tokens(meta(5, H, P, N), meta(3, 6, H, P), meta(3, 6, H),
                                           meta(H), meta(3, 6, 2, N), meta(3, 6, 2, N),
                                           state_write="none")
    assert out.shape == (3, 6, H, P)
    assert st.selective_state_update(meta(3, 16, N), meta(3, 16), meta(3, 16), meta(16, N),
                                     meta(3, N), meta(3, N)).shape == (3, 16)


def test_decode_step_fake_shapes():
    S, H, P, N, G, L, W = 4, 4, 8, 16, 1, 3, 4
    Dc = H * P + 2 * G * N
    i32 = torch.int32
    y = st.mamba2_decode_step(meta(S, Dc, W - 1), meta(S, H, P, N), meta(S, L, Dc), meta(S, L, H),
                              meta(S, dtype=i32), meta(S, dtype=i32), meta(Dc, W), meta(H),
                              xBC=meta(2, L, Dc, dtype=torch.bfloat16), dt=meta(2, L, H),
                              num_accepted=meta(2, dtype=i32))
    assert y.shape == (2, L, H, P) and y.dtype == torch.bfloat16


def test_seq_idx_positions():
    seq_idx = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2]], dtype=torch.int32)
    pos = st.conv.seq_idx_positions(seq_idx)
    assert pos.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3]] and pos.dtype == torch.int32


@pytest.mark.parametrize("block, ops", [
    (Mamba1Block, {"causal_conv1d_fwd", "causal_conv1d_bwd", "selective_scan_fwd",
                   "selective_scan_bwd"}),
    (Mamba2Block, {"causal_conv1d_fwd", "causal_conv1d_bwd", "ssd_fwd", "ssd_bwd"}),
])
def test_block_training_step_traces_with_fake_tensors(block, ops):
    """A training step's forward and backward trace through the fake implementations into one
    graph of the custom ops (what torch.compile sees), without running a kernel."""
    torch.manual_seed(0)
    model = block()
    params = dict(model.named_parameters())

    def step(h, params):
        out = torch.func.functional_call(model, params, (h,))
        return torch.autograd.grad(out.sum(), list(params.values()))

    graph = make_fx(step, tracing_mode="fake")(torch.randn(2, 48, 32), params)
    called = {str(n.target).split(".")[1] for n in graph.graph.nodes
              if n.op == "call_function" and str(n.target).startswith("ssmjit.")}
    assert called == ops
