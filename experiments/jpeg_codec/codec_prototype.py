import math, functools, torch, numpy as np

CONST_BITS, PASS1_BITS = 13, 2
def fix13(x): return int(x * (1 << CONST_BITS) + 0.5)
C = {k: fix13(v) for k, v in dict(
    c0298=0.298631336, c0390=0.390180644, c0541=0.541196100, c0765=0.765366865,
    c0899=0.899976223, c1175=1.175875602, c1501=1.501321110, c1847=1.847759065,
    c1961=1.961570560, c2053=2.053119869, c2562=2.562915447, c3072=3.072711026).items()}

def fdct_1d(d, even_shift):
    """LL&M forward 1-D DCT as in IJG islow: returns the 8 pre-descale sums (ints); outputs 0/4
    are scaled by 2**even_shift (so they descale exactly)."""
    t0, t7 = d[0] + d[7], d[0] - d[7]
    t1, t6 = d[1] + d[6], d[1] - d[6]
    t2, t5 = d[2] + d[5], d[2] - d[5]
    t3, t4 = d[3] + d[4], d[3] - d[4]
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    out = [0] * 8
    out[0] = (t10 + t11) << even_shift
    out[4] = (t10 - t11) << even_shift
    z1 = (t12 + t13) * C['c0541']
    out[2] = z1 + t13 * C['c0765']
    out[6] = z1 - t12 * C['c1847']
    z1, z2, z3, z4 = t4 + t7, t5 + t6, t4 + t6, t5 + t7
    z5 = (z3 + z4) * C['c1175']
    t4, t5, t6, t7 = t4 * C['c0298'], t5 * C['c2053'], t6 * C['c3072'], t7 * C['c1501']
    z1, z2, z3, z4 = -z1 * C['c0899'], -z2 * C['c2562'], -z3 * C['c1961'], -z4 * C['c0390']
    z3 += z5; z4 += z5
    out[7] = t4 + z1 + z3
    out[5] = t5 + z2 + z4
    out[3] = t6 + z2 + z3
    out[1] = t7 + z1 + z4
    return out

def idct_1d(c):
    z2, z3 = c[2], c[6]
    z1 = (z2 + z3) * C['c0541']
    t2 = z1 - z3 * C['c1847']
    t3 = z1 + z2 * C['c0765']
    t0 = (c[0] + c[4]) << CONST_BITS
    t1 = (c[0] - c[4]) << CONST_BITS
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    t0, t1, t2, t3 = c[7], c[5], c[3], c[1]
    z1, z2, z3, z4 = t0 + t3, t1 + t2, t0 + t2, t1 + t3
    z5 = (z3 + z4) * C['c1175']
    t0, t1, t2, t3 = t0 * C['c0298'], t1 * C['c2053'], t2 * C['c3072'], t3 * C['c1501']
    z1, z2, z3, z4 = -z1 * C['c0899'], -z2 * C['c2562'], -z3 * C['c1961'], -z4 * C['c0390']
    z3 += z5; z4 += z5
    t0 += z1 + z3; t1 += z2 + z4; t2 += z2 + z3; t3 += z1 + z4
    return [t10 + t3, t11 + t2, t12 + t1, t13 + t0, t13 - t0, t12 - t1, t11 - t2, t10 - t3]

def matrix(f):
    return np.array([f([int(i == k) for i in range(8)]) for k in range(8)], dtype=np.int64).T  # (out, in)

FD1 = matrix(lambda d: fdct_1d(d, PASS1_BITS + CONST_BITS - PASS1_BITS)); N_FD1 = CONST_BITS - PASS1_BITS
FD2 = matrix(lambda d: fdct_1d(d, CONST_BITS)); N_FD2 = CONST_BITS + PASS1_BITS
ID = matrix(idct_1d); N_ID1 = CONST_BITS - PASS1_BITS; N_ID2 = CONST_BITS + PASS1_BITS + 3


LUM = [16,11,10,16,24,40,51,61,12,12,14,19,26,58,60,55,14,13,16,24,40,57,69,56,14,17,22,29,51,87,80,62,
       18,22,37,56,68,109,103,77,24,35,55,64,81,104,113,92,49,64,78,87,103,121,120,101,72,92,95,98,112,100,103,99]
CHR = [17,18,24,47]+[99]*4+[18,21,26,66]+[99]*4+[24,26,56]+[99]*5+[47,66]+[99]*6+[99]*32

def qtable(base, quality):
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return np.array([min(max((b * scale + 50) // 100, 1), 255) for b in base]).reshape(8, 8)

def recip(q):
    """libjpeg-turbo compute_reciprocal for divisor 8q: (fq, c, r) with |v| -> ((|v| + c) fq) >> r"""
    div = 8 * int(q)
    b = div.bit_length() - 1
    r = 16 + b
    fq, fr = divmod(1 << r, div)
    c = div // 2
    if fr == 0:
        fq >>= 1; r -= 1
    elif fr <= div // 2:
        c += 1
    else:
        fq += 1
    return fq, c, r


def FIX16(x): return int(x * 65536 + 0.5)
S16 = 2.0 ** -16
RGB2YCC = np.array([[FIX16(0.299), FIX16(0.587), FIX16(0.114)],
                    [-FIX16(0.16874), -FIX16(0.33126), 32768],
                    [32768, -FIX16(0.41869), -FIX16(0.08131)]], dtype=np.float64)
RGB2YCC_BIAS = np.array([32768, (128 << 16) + 32767, (128 << 16) + 32767], dtype=np.float64)

@functools.lru_cache(None)
def consts(quality):
    qy, qc = qtable(LUM, quality), qtable(CHR, quality)
    out = {}
    out['ycc'] = torch.as_tensor(RGB2YCC * S16, dtype=torch.float32)
    out['ycc_b'] = torch.as_tensor(RGB2YCC_BIAS * S16, dtype=torch.float32).view(3, 1)
    # fdct pass 1 on level-shifted rows, float32 exact (|sum| < 2^23)
    out['fd1'] = torch.as_tensor(FD1.T * 2.0 ** -N_FD1, dtype=torch.float32)
    out['fd1_b'] = torch.as_tensor(-128 * FD1.sum(1) * 2.0 ** -N_FD1 + 0.5, dtype=torch.float32)
    out['fd2'] = torch.as_tensor(FD2.T * 2.0 ** -N_FD2, dtype=torch.float64)
    out['fd2_b'] = torch.full((8,), 0.5, dtype=torch.float64)
    for k, Q in (('y', qy), ('c', qc)):
        fq, cc, rr = (np.array(a, dtype=np.float64) for a in zip(*[recip(q) for q in Q.ravel()]))
        # layout (v, ..., u): Q[u, v] -> (8v, 1, 8u)
        out[k + '_c'] = torch.as_tensor(cc.reshape(8, 8).T, dtype=torch.float64).view(8, 1, 8)
        out[k + '_s'] = torch.as_tensor((fq * 2.0 ** -rr).reshape(8, 8).T, dtype=torch.float64).view(8, 1, 8)
        # idct pass 1 per v: coef (u) -> rows (y): ID @ diag(Q[:, v]); as (8v, 8u, 8y) for bmm
        mats = np.stack([(ID * Q[:, v][None, :]).T for v in range(8)]) * 2.0 ** -N_ID1
        out[k + '_id1'] = torch.as_tensor(mats, dtype=torch.float64)
    out['id1_b'] = torch.full((8,), 0.5, dtype=torch.float64)
    out['id2'] = torch.as_tensor(ID.T * 2.0 ** -N_ID2, dtype=torch.float64)
    out['id2_b'] = torch.full((8,), 0.5 + 128, dtype=torch.float64)
    return out

def codec_plane(p, k, K):
    """p: (n, h, w) float32 integer samples 0..255 -> decoded samples float32 (n, h, w)."""
    n, h, w = p.shape
    hb, wb = h // 8, w // 8
    t = torch.addmm(K['fd1_b'], p.view(-1, 8), K['fd1']).floor_()          # (n, hb, r, wb, v)
    t = t.view(n, hb, 8, wb, 8).permute(4, 0, 1, 3, 2).to(torch.float64, memory_format=torch.contiguous_format)  # (v, n, hb, wb, r)
    t = torch.addmm(K['fd2_b'], t.view(-1, 8), K['fd2']).floor_().view(8, -1, 8)   # (v, P, u)
    mag = t.abs().add_(K[k + '_c']).mul_(K[k + '_s']).floor_().copysign_(t)
    t = torch.baddbmm(K['id1_b'].view(1, 1, 8), mag, K[k + '_id1']).floor_()  # (v, P, y)
    t = t.view(8, n, hb, wb, 8).permute(1, 2, 4, 3, 0).contiguous()          # (n, hb, y, wb, v)
    t = torch.addmm(K['id2_b'], t.view(-1, 8), K['id2']).floor_().clamp_(0, 255)
    return t.to(torch.float32).view(n, h, w)

def downsample(p):
    n, H, W = p.shape
    q = p.view(n, H // 2, 2, W)
    q = q[:, :, 0] + q[:, :, 1]                      # (n, h, W)
    q = q.view(n, H // 2, W // 2, 2)
    out = q[..., 0] + q[..., 1]
    out.view(n, H // 2, W // 4, 2).add_(torch.tensor([1.0, 2.0]))
    return out.mul_(0.25).floor_()

def upsample(c):
    n, h, w = c.shape
    cs = torch.empty(n, h, 2, w)
    torch.add(c[:, :-1], c[:, 1:], alpha=3, out=cs[:, 1:, 0])   # row 2i: 3 c[i] + c[i-1]
    torch.mul(c[:, 0], 4, out=cs[:, 0, 0])
    torch.add(c[:, 1:], c[:, :-1], alpha=3, out=cs[:, :-1, 1])  # row 2i+1: 3 c[i] + c[i+1]
    torch.mul(c[:, -1], 4, out=cs[:, -1, 1])
    cs = cs.view(n, 2 * h, w)
    out = torch.empty(n, 2 * h, w, 2)
    torch.add(cs[:, :, :-1], cs[:, :, 1:], alpha=3, out=out[:, :, 1:, 0])
    torch.mul(cs[:, :, 0], 4, out=out[:, :, 0, 0])
    torch.add(cs[:, :, 1:], cs[:, :, :-1], alpha=3, out=out[:, :, :-1, 1])
    torch.mul(cs[:, :, -1], 4, out=out[:, :, -1, 1])
    out.add_(torch.tensor([8.0, 7.0])).mul_(1 / 16).floor_()
    return out.view(n, 2 * h, 2 * w)

def roundtrip(img, quality, chunk=256):
    K = consts(quality)
    out = torch.empty_like(img)
    for s in range(0, img.shape[0], chunk):
        out[s:s + chunk] = _roundtrip(img[s:s + chunk], K)
    return out

def _roundtrip(img, K):
    n, H, W, _ = img.shape
    planes = img.permute(3, 0, 1, 2).reshape(3, -1).to(torch.float32)
    ycc = torch.addmm(K['ycc_b'], K['ycc'], planes).floor_().view(3, n, H, W)
    Y = codec_plane(ycc[0], 'y', K)
    Cb = upsample(codec_plane(downsample(ycc[1]), 'c', K)).sub_(128)
    Cr = upsample(codec_plane(downsample(ycc[2]), 'c', K)).sub_(128)
    out = torch.empty(n, H, W, 3, dtype=torch.uint8)
    r = (Cr * FIX16(1.402)).add_(32768).mul_(S16).floor_().add_(Y).clamp_(0, 255)
    out[..., 0] = r
    g = (Cb * -FIX16(0.34414)).add_(Cr, alpha=-FIX16(0.71414)).add_(32768).mul_(S16).floor_().add_(Y).clamp_(0, 255)
    out[..., 1] = g
    b = Cb.mul_(FIX16(1.772)).add_(32768).mul_(S16).floor_().add_(Y).clamp_(0, 255)
    out[..., 2] = b
    return out
