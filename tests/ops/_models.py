"""Models as their authors write them (plain torch, no meshshard call inside), for DomainParallel's
model-level tests: a Transolver (Wu et al., 2024: Physics-Attention over learned slices), 2-D and
3-D U-Nets (Ronneberger et al., 2015), a Point Transformer (Zhao et al., 2021: vector attention
over kNN neighbourhoods) and a DiT (Peebles and Xie, 2023) with natten's neighbourhood attention.

``na2d`` is natten's ``natten.functional.na2d`` (same signature, layout and operator); natten
builds from source only, so the models take meshshard's implementation of it under that name."""
import torch
import torch.nn.functional as F
from torch import nn

from meshshard.tensor.functional import na2d  # stands for: from natten.functional import na2d


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


def query_and_group(nsample, xyz, new_xyz, feat, idx, use_xyz=True):
    """``pointops.queryandgroup`` of the Point Transformer code with the neighbour ids ``idx``
    ``[m, nsample]`` given: the neighbours' features (and their positions relative to the query)."""
    m, c = idx.shape[0], feat.shape[1]
    grouped_feat = feat[idx.view(-1).long(), :].view(m, nsample, c)
    if not use_xyz:
        return grouped_feat
    grouped_xyz = xyz[idx.view(-1).long(), :].view(m, nsample, 3) - new_xyz.unsqueeze(1)
    return torch.cat((grouped_xyz, grouped_feat), -1)


class PointTransformerLayer(nn.Module):
    """Vector attention over each point's ``nsample`` nearest neighbours (Zhao et al., 2021), as
    the reference implementation writes it: position encoding of the relative positions, weights
    from ``k_j - q_i + delta_ij`` through an MLP, softmax over the neighbours, channels shared in
    ``share_planes`` groups."""

    def __init__(self, in_planes, out_planes, share_planes=2, nsample=6):
        super().__init__()
        self.mid_planes = mid_planes = out_planes
        self.out_planes, self.share_planes, self.nsample = out_planes, share_planes, nsample
        # The reference code gives these Linears biases, but in training mode the output does not
        # depend on them (each adds a per-channel constant that a BatchNorm after it, or the softmax
        # over the neighbours, removes): their gradient is zero up to rounding, which Adam's first
        # step (about lr * sign(gradient)) would turn into noise. Left out, as U-Net codes leave out
        # a conv bias before a norm; the function computed is the same.
        self.linear_q = nn.Linear(in_planes, mid_planes, bias=False)
        self.linear_k = nn.Linear(in_planes, mid_planes, bias=False)
        self.linear_v = nn.Linear(in_planes, out_planes, bias=False)
        self.linear_p = nn.Sequential(nn.Linear(3, 3, bias=False), nn.BatchNorm1d(3), nn.ReLU(inplace=True),
                                      nn.Linear(3, out_planes, bias=False))
        self.linear_w = nn.Sequential(nn.BatchNorm1d(mid_planes), nn.ReLU(inplace=True),
                                      nn.Linear(mid_planes, mid_planes // share_planes, bias=False),
                                      nn.BatchNorm1d(mid_planes // share_planes), nn.ReLU(inplace=True),
                                      nn.Linear(out_planes // share_planes, out_planes // share_planes, bias=False))
        self.softmax = nn.Softmax(dim=1)

    def forward(self, p, x, idx):
        x_q, x_k, x_v = self.linear_q(x), self.linear_k(x), self.linear_v(x)  # (n, c)
        x_k = query_and_group(self.nsample, p, p, x_k, idx, use_xyz=True)  # (n, nsample, 3 + c)
        x_v = query_and_group(self.nsample, p, p, x_v, idx, use_xyz=False)  # (n, nsample, c)
        p_r, x_k = x_k[:, :, 0:3], x_k[:, :, 3:]
        for i, layer in enumerate(self.linear_p):
            p_r = layer(p_r.transpose(1, 2).contiguous()).transpose(1, 2).contiguous() if i == 1 else layer(p_r)
        w = x_k - x_q.unsqueeze(1) + p_r  # (n, nsample, c)
        for i, layer in enumerate(self.linear_w):
            w = layer(w.transpose(1, 2).contiguous()).transpose(1, 2).contiguous() if i % 3 == 0 else layer(w)
        w = self.softmax(w)  # (n, nsample, c / share)
        n, nsample, c = x_v.shape
        s = self.share_planes
        return ((x_v + p_r).view(n, nsample, s, c // s) * w.unsqueeze(2)).sum(1).view(n, c)


class PointTransformerBlock(nn.Module):
    def __init__(self, planes, share_planes=2, nsample=6):
        super().__init__()
        self.linear1, self.bn1 = nn.Linear(planes, planes, bias=False), nn.BatchNorm1d(planes)
        self.transformer2 = PointTransformerLayer(planes, planes, share_planes, nsample)
        self.bn2 = nn.BatchNorm1d(planes)
        self.linear3, self.bn3 = nn.Linear(planes, planes, bias=False), nn.BatchNorm1d(planes)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, p, x, idx):
        identity = x
        x = self.relu(self.bn1(self.linear1(x)))
        x = self.relu(self.bn2(self.transformer2(p, x, idx)))
        x = self.bn3(self.linear3(x))
        return self.relu(x + identity)


class PointTransformer(nn.Module):
    """``(p [N, 3], x [N, in_dim], idx [N, nsample] neighbour ids) -> [N, out_dim]``: an embedding,
    point transformer blocks on a fixed kNN neighbourhood, a head."""

    def __init__(self, in_dim, out_dim, planes=8, depth=2, nsample=6):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_dim, planes, bias=False), nn.BatchNorm1d(planes), nn.ReLU(inplace=True))
        self.blocks = nn.ModuleList([PointTransformerBlock(planes, 2, nsample) for _ in range(depth)])
        self.head = nn.Sequential(nn.Linear(planes, planes), nn.ReLU(inplace=True), nn.Linear(planes, out_dim))

    def forward(self, p, x, idx):
        x = self.embed(x)
        for block in self.blocks:
            x = block(p, x, idx)
        return self.head(x)


def modulate(x, shift, scale):
    """DiT's adaLN modulation of a channels-last grid ``[B, H, W, C]`` by ``[B, C]`` vectors."""
    return x * (1 + scale[:, None, None]) + shift[:, None, None]


class NeighborhoodAttention2D(nn.Module):
    """natten's ``NeighborhoodAttention2D``: qkv projection, ``na2d`` over a ``kernel_size`` window
    in natten's layout ``[B, H, W, heads, head_dim]``, output projection."""

    def __init__(self, dim, num_heads, kernel_size, dilation=1):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.kernel_size, self.dilation = kernel_size, dilation
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, H, W, C = x.shape
        qkv = self.qkv(x).reshape(B, H, W, 3, self.num_heads, self.head_dim).permute(3, 0, 1, 2, 4, 5)
        q, k, v = qkv[0], qkv[1], qkv[2]
        x = na2d(q, k, v, kernel_size=self.kernel_size, dilation=self.dilation)
        return self.proj(x.reshape(B, H, W, C))


class DiTBlock(nn.Module):
    """A DiT block (Peebles and Xie, 2023) with adaLN-Zero conditioning, neighbourhood attention in
    place of global attention (as in Hourglass / natten DiTs), and an MLP."""

    def __init__(self, hidden, num_heads, kernel_size=3, mlp_ratio=2.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = NeighborhoodAttention2D(hidden, num_heads, kernel_size)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden, int(hidden * mlp_ratio)), nn.GELU(approximate="tanh"),
                                 nn.Linear(int(hidden * mlp_ratio), hidden))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa[:, None, None] * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        return x + gate_mlp[:, None, None] * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


class DiT(nn.Module):
    """``(x [B, H, W, in_ch] channels-last grid, c [B, cond_dim] conditioning) -> [B, H, W, out_ch]``:
    a per-pixel embedding, DiT blocks, DiT's final adaLN layer. The adaLN weights start random
    (not DiT's zeros) so every parameter gets a gradient."""

    def __init__(self, in_ch, out_ch, cond_dim, hidden=8, num_heads=2, depth=2, kernel_size=3):
        super().__init__()
        self.x_embed = nn.Linear(in_ch, hidden)
        self.c_embed = nn.Sequential(nn.Linear(cond_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.blocks = nn.ModuleList([DiTBlock(hidden, num_heads, kernel_size) for _ in range(depth)])
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.adaLN_final = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))
        self.linear = nn.Linear(hidden, out_ch)

    def forward(self, x, c):
        x, c = self.x_embed(x), self.c_embed(c)
        for block in self.blocks:
            x = block(x, c)
        shift, scale = self.adaLN_final(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class GlobalTokenHead(nn.Module):
    """A global-context branch after a GNN: a token from the mean over ALL nodes, added back to
    every node, then a per-node head (as in global-pooling / virtual-node readouts)."""

    def __init__(self, dim, out_dim):
        super().__init__()
        self.token = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))
        self.head = nn.Linear(dim, out_dim)

    def forward(self, h):
        return self.head(torch.relu(h) + self.token(h.mean(0, keepdim=True)))


class KnnThenSlices(nn.Module):
    """A point model mixing a local and a global layer: a Point Transformer block on kNN
    neighbourhoods, then a Transolver block (slice tokens over all points).
    ``(p [N, 3], x [N, in_dim], idx [N, nsample]) -> [N, out_dim]``."""

    def __init__(self, in_dim, out_dim, planes=8, nsample=4):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(in_dim, planes), nn.ReLU(inplace=True))
        self.local = PointTransformerBlock(planes, 2, nsample)
        self.glob = TransolverBlock(planes, heads=2, dim_head=planes // 2, slice_num=4)
        self.head = nn.Linear(planes, out_dim)

    def forward(self, p, x, idx):
        x = self.local(p, self.embed(x), idx)
        return self.head(self.glob(x[None])[0])


class GnnThenToken(nn.Module):
    """One model: two GraphSAGE layers, then a global token from the mean over ALL nodes added back
    to every node (a virtual-node / global-context readout). ``(x [N, F], edge_index) -> [N, out]``."""

    def __init__(self, in_dim, out_dim, hidden=8):
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.conv1, self.conv2 = SAGEConv(in_dim, hidden), SAGEConv(hidden, hidden)
        self.head = GlobalTokenHead(hidden, out_dim)

    def forward(self, x, edge_index):
        h = torch.relu(self.conv1(x, edge_index))
        return self.head(self.conv2(h, edge_index))


class GnnThenSlices(nn.Module):
    """One model: a GraphSAGE layer, then a Transolver block (slice tokens over ALL nodes), then a
    per-node head. ``(x [N, F], edge_index) -> [N, out]``."""

    def __init__(self, in_dim, out_dim, hidden=8):
        super().__init__()
        from torch_geometric.nn import SAGEConv

        self.conv = SAGEConv(in_dim, hidden)
        self.block = TransolverBlock(hidden, heads=2, dim_head=hidden // 2, slice_num=4)
        self.head = nn.Linear(hidden, out_dim)

    def forward(self, x, edge_index):
        h = torch.relu(self.conv(x, edge_index))
        return self.head(self.block(h[None])[0])
