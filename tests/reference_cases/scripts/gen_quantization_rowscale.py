import os
import numpy as np
# Reuses the case() helper of gen_quantization.py; writes into the same folder.
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'gen_quantization.py')).read().split('f32=lambda')[0].replace('__file__', repr(os.path.abspath(__file__))))
rng=np.random.default_rng(2)
qa=rng.integers(0,255,(2,3,4)).astype(np.uint8); qb=rng.integers(0,255,(4,5)).astype(np.uint8)
asc=np.array([0.01,0.02,0.03],np.float32); bsc=(rng.random(5)*0.02+0.01).astype(np.float32)
acc=(qa.astype(np.int64)-7)@(qb.astype(np.int64)-9)
y=np.clip(np.rint(acc*(asc.astype(np.float64)[:,None]*bsc.astype(np.float64)[None,:]/0.5))+3,0,255).astype(np.uint8)
case('test_x_qmm_rowscale','QLinearMatMul',[qa,asc,np.array(np.uint8(7)),qb,bsc,np.array(np.uint8(9)),np.array(np.float32(0.5)),np.array(np.uint8(3))],[y],opset=10)
