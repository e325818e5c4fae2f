"""Small Mamba-1 and Mamba-2 blocks made of ssmjit.torch's drop-ins, as models call them."""
import torch

import ssmjit.torch as st


class Mamba1Block(torch.nn.Module):
    def __init__(self, d_model=32, expand=2, N=8, W=4, rank=4):
        super().__init__()
        E = expand * d_model
        self.in_proj = torch.nn.Linear(d_model, 2 * E)
        self.conv_weight = torch.nn.Parameter(torch.randn(E, W) * 0.3)
        self.conv_bias = torch.nn.Parameter(torch.zeros(E))
        self.x_proj = torch.nn.Linear(E, rank + 2 * N, bias=False)
        self.dt_proj = torch.nn.Linear(rank, E)
        self.A_log = torch.nn.Parameter(torch.randn(E, N) * 0.5)
        self.D = torch.nn.Parameter(torch.ones(E))
        self.out_proj = torch.nn.Linear(E, d_model)
        self.rank, self.N = rank, N

    def forward(self, h):  # (b, L, d_model)
        x, z = self.in_proj(h).transpose(1, 2).chunk(2, dim=1)
        x = st.causal_conv1d_fn(x, self.conv_weight, self.conv_bias, activation="silu")
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.rank, self.N, self.N], dim=-1)
        dt = (dt @ self.dt_proj.weight.T).transpose(1, 2)
        y = st.selective_scan_fn(x, dt, -torch.exp(self.A_log), B.transpose(1, 2),
                                 C.transpose(1, 2), self.D, z, self.dt_proj.bias, True)
        return self.out_proj(y.transpose(1, 2))


class Mamba2Block(torch.nn.Module):
    def __init__(self, d_model=32, H=4, P=16, N=16, G=1, W=4):
        super().__init__()
        self.H, self.P, self.N, self.G = H, P, N, G
        Dc = H * P + 2 * G * N
        self.in_proj = torch.nn.Linear(d_model, H * P + Dc + H)
        self.conv_weight = torch.nn.Parameter(torch.randn(Dc, W) * 0.3)
        self.A_log = torch.nn.Parameter(torch.randn(H) * 0.5)
        self.D = torch.nn.Parameter(torch.ones(H))
        self.dt_bias = torch.nn.Parameter(torch.zeros(H))
        self.out_proj = torch.nn.Linear(H * P, d_model)

    def forward(self, h):  # (b, L, d_model)
        b, L, _ = h.shape
        H, P, N, G = self.H, self.P, self.N, self.G
        z, xBC, dt = self.in_proj(h).split([H * P, H * P + 2 * G * N, H], dim=-1)
        xBC = st.causal_conv1d_fn(xBC.transpose(1, 2), self.conv_weight,
                                  activation="silu").transpose(1, 2)
        x, B, C = xBC.split([H * P, G * N, G * N], dim=-1)
        y = st.mamba_chunk_scan_combined(x.reshape(b, L, H, P), dt, -torch.exp(self.A_log),
                                         B.reshape(b, L, G, N), C.reshape(b, L, G, N), 64, self.D,
                                         z.reshape(b, L, H, P), self.dt_bias, dt_softplus=True)
        return self.out_proj(y.reshape(b, L, H * P))
