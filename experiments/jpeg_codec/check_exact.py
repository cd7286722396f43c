import numpy as np, io, torch, time, sys
from PIL import Image
import sys; roundtrip = __import__(sys.argv[1] if len(sys.argv)>1 else "codec_prototype").roundtrip
d=np.load('/work/shared/data/cifar10_test.npz')
rng=np.random.default_rng(0)
x=d['x'][rng.permutation(10000)[:1000]]
extra=rng.integers(0,256,(200,32,32,3),dtype=np.uint8)
sat=(rng.integers(0,2,(200,32,32,3))*255).astype(np.uint8)
x=np.concatenate([x,extra,sat])
def pil(a,q):
    b=io.BytesIO(); Image.fromarray(a).save(b,'JPEG',quality=q); b.seek(0); return np.asarray(Image.open(b))
for q in (80,65,58,50,40):
    ref=np.stack([pil(a,q) for a in x])
    out=roundtrip(torch.from_numpy(x),q).numpy()
    dd=np.abs(ref.astype(int)-out)
    print(q,'mismatch frac',(dd>0).mean(),'max',dd.max(), 'imgs bad', (dd.reshape(len(x),-1).max(1)>0).sum())
