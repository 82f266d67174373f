"""Models as their authors write them (plain torch, no meshshard call inside), for DomainParallel's
model-level tests: a Transolver (Wu et al., 2024: Physics-Attention over learned slices), 2-D and
3-D U-Nets (Ronneberger et al., 2015) and a ViT/DiT-style block with neighbourhood attention."""
import torch
import torch.nn.functional as F
from torch import nn


class PhysicsAttention(nn.Module):
    """Transolver's Physics-Attention on an irregular mesh: points -> slice tokens -> attention
    among tokens -> back to points (the reference implementation's structure)."""

    def __init__(self, dim, heads=2, dim_head=4, slice_num=5):
        super().__init__()
        inner = dim_head * heads
        self.dim_head, self.heads = dim_head, heads
        self.scale = dim_head ** -0.5
        self.softmax = nn.Softmax(dim=-1)
        self.temperature = nn.Parameter(torch.ones([1, heads, 1, 1]) * 0.5)
        self.in_project_x = nn.Linear(dim, inner)
        self.in_project_fx = nn.Linear(dim, inner)
        self.in_project_slice = nn.Linear(dim_head, slice_num)
        self.to_q = nn.Linear(dim_head, dim_head, bias=False)
        self.to_k = nn.Linear(dim_head, dim_head, bias=False)
        self.to_v = nn.Linear(dim_head, dim_head, bias=False)
        self.to_out = nn.Linear(inner, dim)

    def forward(self, x):
        B, N, C = x.shape
        fx_mid = self.in_project_fx(x).reshape(B, N, self.heads, self.dim_head).permute(0, 2, 1, 3)
        x_mid = self.in_project_x(x).reshape(B, N, self.heads, self.dim_head).permute(0, 2, 1, 3)
        slice_weights = self.softmax(self.in_project_slice(x_mid) / self.temperature)  # B H N G
        slice_norm = slice_weights.sum(2)  # B H G
        slice_token = torch.einsum("bhnc,bhng->bhgc", fx_mid, slice_weights)
        slice_token = slice_token / ((slice_norm + 1e-5)[:, :, :, None].repeat(1, 1, 1, self.dim_head))
        q, k, v = self.to_q(slice_token), self.to_k(slice_token), self.to_v(slice_token)
        attn = self.softmax(torch.matmul(q, k.transpose(-1, -2)) * self.scale)
        out_slice_token = torch.matmul(attn, v)  # B H G D
        out_x = torch.einsum("bhgc,bhng->bhnc", out_slice_token, slice_weights)
        out_x = out_x.permute(0, 2, 1, 3).reshape(B, N, self.heads * self.dim_head)
        return self.to_out(out_x)


class TransolverBlock(nn.Module):
    def __init__(self, dim, heads=2, dim_head=4, slice_num=5):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = PhysicsAttention(dim, heads, dim_head, slice_num)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, fx):
        fx = self.attn(self.ln_1(fx)) + fx
        return self.mlp(self.ln_2(fx)) + fx


class Transolver(nn.Module):
    """``[B, N, in_dim]`` point features -> ``[B, N, out_dim]``."""

    def __init__(self, in_dim, out_dim, dim=8, depth=2, heads=2, slice_num=5):
        super().__init__()
        self.preprocess = nn.Sequential(nn.Linear(in_dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.placeholder = nn.Parameter((1 / dim) * torch.rand(dim))
        self.blocks = nn.ModuleList([TransolverBlock(dim, heads, dim // heads, slice_num) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out_dim)

    def forward(self, x):
        fx = self.preprocess(x) + self.placeholder[None, None, :]
        for block in self.blocks:
            fx = block(fx)
        return self.head(self.ln(fx))


class DoubleConv(nn.Module):
    def __init__(self, cin, cout, conv=nn.Conv2d, norm=nn.BatchNorm2d):
        super().__init__()
        # no conv bias before a norm (the norm removes it), as the usual U-Net code has it
        self.net = nn.Sequential(conv(cin, cout, 3, padding=1, bias=False), norm(cout), nn.ReLU(inplace=True),
                                 conv(cout, cout, 3, padding=1, bias=False), norm(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.net(x)


class UNet2d(nn.Module):
    """Two levels: conv blocks, max pooling down, transposed convolution up, skip concatenation."""

    def __init__(self, cin, cout, width=4):
        super().__init__()
        self.enc1 = DoubleConv(cin, width)
        self.enc2 = DoubleConv(width, 2 * width)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec1 = DoubleConv(2 * width, width)
        self.out = nn.Conv2d(width, cout, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        d1 = self.dec1(torch.cat([self.up(e2), e1], dim=1))
        return self.out(d1)


class UNet3d(nn.Module):
    """A 3-D U-Net level with trilinear upsampling (as in many 3-D segmentation codes)."""

    def __init__(self, cin, cout, width=3):
        super().__init__()
        self.enc1 = DoubleConv(cin, width, nn.Conv3d, nn.BatchNorm3d)
        self.enc2 = DoubleConv(width, 2 * width, nn.Conv3d, nn.BatchNorm3d)
        self.dec1 = DoubleConv(3 * width, width, nn.Conv3d, nn.BatchNorm3d)
        self.out = nn.Conv3d(width, cout, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.avg_pool3d(e1, 2))
        up = F.interpolate(e2, scale_factor=2, mode="trilinear", align_corners=False)
        return self.out(self.dec1(torch.cat([up, e1], dim=1)))
