"""The argument sets ssmjit.torch builds, held to the C++ ops' own checks on a machine without a
GPU: host tensors are described to the extension as CUDA tensors (at made-up addresses, one per
storage), so every check at the op's edge runs, and a call whose arguments all pass goes on to
load the CUDA driver, which is not there (ssmjit.Error of kind Unavailable). A wrong argument
stops at the checks (kind InvalidArgument, naming it). Never run where a driver exists: there the
made-up addresses would reach a kernel."""
import ctypes

import pytest
import torch

import ssmjit
import ssmjit.torch as st
from blocks import Mamba1Block, Mamba2Block
from ssmjit.torch import _call, conv, decode, scan, ssd



def driver_loads():
    try:
        ctypes.CDLL("libcuda.so.1")  # what ssmjit loads
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() or driver_loads(),
    reason="describes host tensors as CUDA tensors: only where no CUDA driver can be loaded")
I32 = torch.int32


@pytest.fixture(autouse=True)
def host_tensors_described_as_cuda(monkeypatch):
    real = _call._descriptor
    bases = {}

    def describe(t):
        d = real(t)
        if not isinstance(t, torch.Tensor):
            return d
        storage = t.untyped_storage().data_ptr()
        base = bases.setdefault(storage, 0x7F0000000000 + len(bases) * 0x10000000)
        return (base + t.storage_offset() * t.element_size(),) + d[1:5] + (2, 0)
    monkeypatch.setattr(_call, "_descriptor", describe)


def passes_checks(call):
    with pytest.raises(ssmjit.Error) as e:
        call()
    assert e.value.kind == "Unavailable", str(e.value)


def refused(call, *names):
    with pytest.raises(ssmjit.Error) as e:
        call()
    assert e.value.kind == "InvalidArgument"
    for name in names:
        assert name in str(e.value)


def r(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def cu(*lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=I32)


BF16 = torch.bfloat16


def test_conv():
    x = r(2, 16, 8, 64, dtype=BF16)[:, 0].transpose(1, 2)  # (2, 64, 8): channel-last, row gaps
    w, b, init = r(64, 4), r(64), r(2, 64, 3)
    passes_checks(lambda: st.causal_conv1d_fn(x, w, b, initial_states=init,
                                              return_final_states=True, activation="silu"))
    seq_idx = torch.tensor([[0, 0, 1, 1, 1, 2, 2, 2]], dtype=I32)
    passes_checks(lambda: st.causal_conv1d_fn(r(1, 64, 8), w, b, seq_idx=seq_idx))
    passes_checks(lambda: st.causal_conv1d_varlen(r(1, 64, 8), w, cu(3, 5), b, r(2, 64, 3), True))
    passes_checks(lambda: st.causal_conv1d_slots(
        r(1, 64, 8), w, r(4, 64, 3), b, "silu", cu(3, 5), torch.tensor([1, -1], dtype=I32),
        torch.tensor([2, 1], dtype=I32)))
    passes_checks(lambda: torch.ops.ssmjit.causal_conv1d_bwd(
        x, w, b, torch.empty_like(x), True, None, None, init, r(2, 64, 3), True))
    passes_checks(lambda: torch.ops.ssmjit.causal_conv1d_bwd(
        r(1, 64, 8), w, None, r(1, 64, 8), False, cu(3, 5), None, None, None, False))
    refused(lambda: st.causal_conv1d_fn(x, r(64, 9)), "weight")


def test_conv_update():
    w, b = r(64, 4), r(64)
    idx = torch.tensor([3, -1], dtype=I32)
    passes_checks(lambda: st.causal_conv1d_update(r(2, 64, dtype=BF16), r(4, 64, 3), w, b, "silu",
                                                  conv_state_indices=idx))
    passes_checks(lambda: st.causal_conv1d_update(r(2, 64, 5), r(2, 64, 3), w))
    refused(lambda: st.causal_conv1d_update(r(3, 64), r(2, 64, 3), w), "conv_state")


@pytest.mark.parametrize("varying", [True, False])
def test_scan(varying):
    b, d, L, N = 2, 32, 40, 16
    u = r(b, L, 2 * d, dtype=BF16).transpose(1, 2)[:, :d]  # in_proj's layout: copied to unit stride
    delta, z = r(b, d, L, dtype=BF16), r(b, d, L, dtype=BF16)
    A, D, bias = r(d, N), r(d), r(d)
    B = r(b, N, L, dtype=BF16) if varying else r(d, N)
    C = r(b, 1, N, L, dtype=BF16) if varying else r(d, N)
    passes_checks(lambda: st.selective_scan_fn(u, delta, A, B, C, D, z, bias, True, True))
    Bg = B.unsqueeze(1) if varying else B
    passes_checks(lambda: torch.ops.ssmjit.selective_scan_bwd(
        u.contiguous(), delta, A, Bg, C, D, z, bias, True, None, 0, None, r(b, d, L, dtype=BF16),
        None, False))
    refused(lambda: st.selective_scan_fn(u, delta, r(d + 1, N), B, C), "A")


def test_scan_packed_and_slots():
    d, N, T = 32, 16, 24
    args = (r(1, d, T), r(1, d, T), r(d, N), r(1, 1, N, T), r(1, 1, N, T))
    passes_checks(lambda: st.selective_scan_packed(*args, cu(10, 14), r(d), r(1, d, T), r(d), True,
                                                   r(2, d, N), True, 14, 2048))
    passes_checks(lambda: st.selective_scan_slots(
        *args, r(5, d, N), cu_seqlens=cu(10, 14), initial_state_indices=torch.tensor([4, -1], dtype=I32),
        final_state_indices=torch.tensor([4, 0], dtype=I32)))
    passes_checks(lambda: torch.ops.ssmjit.selective_scan_bwd(
        *args, None, None, None, False, cu(10, 14), 0, r(2, d, N), r(1, d, T), r(2, d, N), True))


def test_ssd():
    b, L, H, P, G, N = 2, 100, 4, 16, 2, 32
    zxbcdt = r(b, L, H * P * 2 + 2 * G * N + H, dtype=BF16)  # Mamba2's in_proj output, sliced
    z, x, B, C, dt = zxbcdt.split([H * P, H * P, G * N, G * N, H], dim=-1)
    x, z = x.reshape(b, L, H, P), z.reshape(b, L, H, P)
    B, C = B.reshape(b, L, G, N), C.reshape(b, L, G, N)
    A, D, dt_bias = r(H), r(H), r(H)
    passes_checks(lambda: st.mamba_chunk_scan_combined(
        x, dt, A, B, C, 64, D, z, dt_bias, r(b, H, P, N), dt_softplus=True,
        dt_limit=(0.001, 0.1), return_final_states=True))
    passes_checks(lambda: torch.ops.ssmjit.ssd_bwd(
        x, dt, A, B, C, 128, r(H, P), z, dt_bias, True, 0.0, 0.0, None, r(b, H, P, N),
        r(b, L, H, P, dtype=BF16), r(b, H, P, N), True, None))
    passes_checks(lambda: torch.ops.ssmjit.ssd_bwd(
        x, dt, A, B, C, 128, r(H, P), z, dt_bias, True, 0.0, 0.0, None, r(b, H, P, N),
        r(b, L, H, P, dtype=BF16), r(b, H, P, N), True, r(b, L, H, P)))
    refused(lambda: torch.ops.ssmjit.ssd_bwd(
        x, dt, A, B, C, 128, r(H, P), z, dt_bias, True, 0.0, 0.0, None, r(b, H, P, N),
        r(b, L, H, P, dtype=BF16), r(b, H, P, N), True, r(b, L, H, P, dtype=BF16)), "forward.y")
    refused(lambda: st.mamba_chunk_scan_combined(x, dt, r(H + 1), B, C, 64), "A")


def test_ssd_packed_and_slots():
    T, H, P, G, N = 90, 4, 16, 1, 32
    args = (r(1, T, H, P), r(1, T, H), r(H), r(1, T, G, N), r(1, T, G, N))
    seq_idx = torch.repeat_interleave(torch.arange(2), torch.tensor([70, 20])).to(I32)[None]
    passes_checks(lambda: st.mamba_chunk_scan_combined(
        *args, 64, seq_idx=seq_idx, cu_seqlens=cu(70, 20), return_final_states=True,
        return_varlen_states=True))
    passes_checks(lambda: st.ssd_packed(*args, cu(70, 20), 64, initial_states=r(2, H, P, N),
                                        return_final_states=True))
    passes_checks(lambda: st.ssd_slots(*args, r(3, H, P, N), 64, cu_seqlens=cu(70, 20),
                                       initial_state_indices=torch.tensor([2, -1], dtype=I32),
                                       final_state_indices=torch.tensor([0, 2], dtype=I32)))
    passes_checks(lambda: torch.ops.ssmjit.ssd_bwd(
        *args, 64, None, None, None, False, 0.0, 0.0, cu(70, 20), r(2, H, P, N), r(1, T, H, P),
        None, True, None))


def test_state_update():
    b, H, P, N, G = 3, 4, 16, 32, 2
    x, z = r(b, H, P, dtype=BF16), r(b, H, P, dtype=BF16)
    dt = r(b, H, dtype=BF16)[..., None].expand(b, H, P)
    A = r(H)[:, None, None].expand(H, P, N)
    D = r(H)[:, None].expand(H, P)
    passes_checks(lambda: st.selective_state_update(
        r(5, H, P, N), x, dt, A, r(b, G, N, dtype=BF16), r(b, G, N, dtype=BF16), D, z, D, True,
        torch.tensor([4, -1, 0], dtype=I32)))
    passes_checks(lambda: st.selective_state_update(
        r(b, 64, 16), r(b, 64), r(b, 64), r(64, 16), r(b, 16), r(b, 16), r(64), r(b, 64), r(64)))
    L = 4
    passes_checks(lambda: st.selective_state_update_tokens(
        r(5, H, P, N), r(b, L, H, P), r(b, L, H), r(H), r(b, L, G, N), r(b, L, G, N),
        dt_softplus=True, state_batch_indices=torch.tensor([1, 2, 3], dtype=I32),
        dst_state_indices=torch.arange(b * L, dtype=I32).reshape(b, L) % 5,
        state_write="per_token", dt_limit=(0.0, 0.5)))
    refused(lambda: st.selective_state_update(r(5, H, P, N), x, dt, A, r(b, 3, N), r(b, 3, N)), "B")


@pytest.mark.parametrize("parts", ["replay_and_verify", "verify", "replay"])
def test_decode_step(parts):
    S, H, P, N, G, W, L, b = 4, 4, 16, 32, 1, 4, 3, 2
    Dc = H * P + 2 * G * N
    state = (r(S, Dc, W - 1, dtype=BF16), r(S, H, P, N), r(S, L, Dc, dtype=BF16),
             r(S, L, H, dtype=BF16), torch.zeros(S, dtype=I32), torch.zeros(S, dtype=I32))
    drafts = {} if parts == "replay" else dict(xBC=r(b, L, Dc, dtype=BF16),
                                                dt=r(b, L, H, dtype=BF16))
    passes_checks(lambda: st.mamba2_decode_step(
        *state, r(Dc, W), r(H), num_accepted=None if parts == "verify" else torch.ones(b, dtype=I32),
        conv_bias=r(Dc), D=r(H), dt_bias=r(H), state_indices=torch.tensor([3, 0], dtype=I32),
        parts=parts, **drafts))


@pytest.fixture
def ops_go_on(monkeypatch):
    """Each op runs its checks and then, with no driver to launch on, returns its outputs
    unwritten, so that a whole step runs through every op's checks."""
    def call(op, device, **fields):
        try:
            _call.call(op, device, **fields)
        except ssmjit.Error as e:
            if e.kind != "Unavailable":
                raise
    for module in (conv, scan, ssd, decode):
        monkeypatch.setattr(module, "call", call)


@pytest.mark.parametrize("block", [Mamba1Block, Mamba2Block])
def test_block_compiles_fullgraph(block, ops_go_on):
    """torch.compile(fullgraph=True) takes a training step of a block whole (no graph break in
    the drop-ins), and every op of its forward and backward passes the C++ checks."""
    torch.manual_seed(0)
    model = block()
    out = torch.compile(model, fullgraph=True, backend="aot_eager")(torch.randn(2, 48, 32))
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_decode_step_compiles_fullgraph(ops_go_on):
    H, P, N, Dc = 4, 16, 32, 4 * 16 + 2 * 32
    conv_w, A = r(Dc, 4), r(H)

    def step(xBC, dt, conv_state, ssm_state, slots):
        xBC = st.causal_conv1d_update(xBC, conv_state, conv_w, None, "silu",
                                      conv_state_indices=slots)
        x, B, C = xBC.split([H * P, N, N], dim=-1)
        return st.selective_state_update(ssm_state, x.reshape(3, H, P), dt, A, B.reshape(3, 1, N),
                                         C.reshape(3, 1, N), None, None, None, True, slots)
    out = torch.compile(step, fullgraph=True, backend="aot_eager")(
        r(3, Dc), r(3, H), r(5, Dc, 3), r(5, H, P, N), torch.tensor([4, 0, 2], dtype=I32))
    assert out.shape == (3, H, P)
