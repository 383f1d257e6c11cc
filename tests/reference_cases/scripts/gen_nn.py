import numpy as np, onnx, os, itertools
from onnx import helper, numpy_helper, TensorProto
root=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'nn')
def save(name, op, inputs, outputs, attrs, opset=18, out_types=None):
    d=os.path.join(root,name,'test_data_set_0'); os.makedirs(d,exist_ok=True)
    ins=[helper.make_tensor_value_info(f'i{k}', helper.np_dtype_to_tensor_dtype(v.dtype) if hasattr(helper,'np_dtype_to_tensor_dtype') else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[v.dtype], v.shape) for k,v in enumerate(inputs)]
    outs=[helper.make_tensor_value_info(f'o{k}', onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[v.dtype], v.shape) for k,v in enumerate(outputs)]
    node=helper.make_node(op,[f'i{k}' for k in range(len(inputs))],[f'o{k}' for k in range(len(outputs))],**attrs)
    m=helper.make_model(helper.make_graph([node],name,ins,outs),opset_imports=[helper.make_opsetid('',opset)])
    m.ir_version=8
    onnx.save(m,os.path.join(root,name,'model.onnx'))
    for k,v in enumerate(inputs): open(f'{d}/input_{k}.pb','wb').write(numpy_helper.from_array(v,f'i{k}').SerializeToString())
    for k,v in enumerate(outputs): open(f'{d}/output_{k}.pb','wb').write(numpy_helper.from_array(v,f'o{k}').SerializeToString())
rng=np.random.default_rng(0)
# LpPool 2d, p=3, pads, strides
x=rng.standard_normal((2,3,5,6)).astype(np.float32)
k=(2,3); s=(2,1); p=3; pads=(1,0,0,1)
xp=np.pad(x,((0,0),(0,0),(pads[0],pads[2]),(pads[1],pads[3])))
H=(5+1-2)//2+1; W=(6+1-3)//1+1
y=np.zeros((2,3,H,W),np.float32)
for i in range(H):
    for j in range(W):
        y[:,:,i,j]=(np.abs(xp[:,:,i*2:i*2+2,j:j+3])**p).sum(axis=(2,3))**(1/p)
save('test_lppool_mine','LpPool',[x],[y],dict(kernel_shape=list(k),strides=list(s),pads=list(pads),p=p))
# GlobalLpPool
y=((np.abs(x)**2).sum(axis=(2,3),keepdims=True))**0.5
save('test_globallppool_mine','GlobalLpPool',[x],[y.astype(np.float32)],{})
# Col2Im doc example + general
inp=np.array([[[1.0, 6.0, 11.0, 16.0, 21.0], [2.0, 7.0, 12.0, 17.0, 22.0], [3.0, 8.0, 13.0, 18.0, 23.0], [4.0, 9.0, 14.0, 19.0, 24.0], [5.0, 0.0, 15.0, 20.0, 25.0]]],np.float32)
out=np.array([[[[1.0, 2.0, 3.0, 4.0, 5.0],[6.0, 7.0, 8.0, 9.0, 0.0],[11.0, 12.0, 13.0, 14.0, 15.0],[16.0, 17.0, 18.0, 19.0, 20.0],[21.0, 22.0, 23.0, 24.0, 25.0]]]],np.float32)
save('test_col2im_mine','Col2Im',[inp,np.array([5,5],np.int64),np.array([1,5],np.int64)],[out],{})
# col2im with strides/pads/dilations, 2 channels: build via im2col adjoint
img=(4,5); blk=(2,2); st=(1,2); dl=(2,1); pd=(1,0,0,1)
oh=(img[0]+pd[0]+pd[2]-((blk[0]-1)*dl[0]+1))//st[0]+1
ow=(img[1]+pd[1]+pd[3]-((blk[1]-1)*dl[1]+1))//st[1]+1
C=2; xin=rng.standard_normal((1,C*4,oh*ow)).astype(np.float32)
Y=np.zeros((1,C,img[0]+pd[0]+pd[2],img[1]+pd[1]+pd[3]),np.float32)
for c in range(C):
  for ki in range(2):
    for kj in range(2):
      for a in range(oh):
        for b in range(ow):
          Y[0,c,a*st[0]+ki*dl[0],b*st[1]+kj*dl[1]]+=xin[0,c*4+ki*2+kj,a*ow+b]
Y=Y[:,:,pd[0]:pd[0]+img[0],pd[1]:pd[1]+img[1]]
save('test_col2im_mine2','Col2Im',[xin,np.array(img,np.int64),np.array(blk,np.int64)],[np.ascontiguousarray(Y)],dict(strides=list(st),dilations=list(dl),pads=list(pd)))
# MaxPool storage order 1 with indices
x=rng.standard_normal((1,2,4,5)).astype(np.float32)
y=np.zeros((1,2,3,4),np.float32); I=np.zeros((1,2,3,4),np.int64)
for c in range(2):
  for i in range(3):
    for j in range(4):
      w=x[0,c,i:i+2,j:j+2]; a=np.unravel_index(np.argmax(w),w.shape)
      y[0,c,i,j]=w[a]; h,ww=i+a[0],j+a[1]; I[0,c,i,j]=c*20+ww*4+h
save('test_maxpool_storage_mine','MaxPool',[x],[y,I],dict(kernel_shape=[2,2],storage_order=1),opset=12)
# ConvTranspose groups + dilations + strides + pads
x=rng.standard_normal((1,4,3,3)).astype(np.float32); g=2
w=rng.standard_normal((4,3,2,2)).astype(np.float32); b=rng.standard_normal(6).astype(np.float32)
s=(2,1); d=(1,2); pads=(1,0,0,1); op=(1,0)
full=[s[i]*(3-1)+op[i]+(2-1)*d[i]+1 for i in range(2)]
F=np.zeros((1,6,full[0],full[1]),np.float32)
for c in range(4):
  gi=c//2
  for m in range(3):
    for i in range(3):
      for j in range(3):
        for ki in range(2):
          for kj in range(2):
            F[0,gi*3+m,i*s[0]+ki*d[0],j*s[1]+kj*d[1]]+=x[0,c,i,j]*w[c,m,ki,kj]
F=F[:,:,pads[0]:full[0]-pads[2],pads[1]:full[1]-pads[3]]+b[None,:,None,None]
save('test_convtranspose_mine','ConvTranspose',[x,w,b],[np.ascontiguousarray(F)],dict(group=g,strides=list(s),dilations=list(d),pads=list(pads),output_padding=list(op)),opset=13)
# ConvInteger per-channel w zero point, int8
x=rng.integers(-100,100,(1,2,4,4)).astype(np.int8); w=rng.integers(-100,100,(3,2,2,2)).astype(np.int8)
xz=np.array(3,np.int8); wz=np.array([1,-2,5],np.int8)
xs=np.pad(x.astype(np.int32)-3,((0,0),(0,0),(1,1),(1,1))); ws=w.astype(np.int32)-wz.astype(np.int32)[:,None,None,None]
y=np.zeros((1,3,5,5),np.int32)
for m in range(3):
  for i in range(5):
    for j in range(5):
      y[0,m,i,j]=(xs[0,:,i:i+2,j:j+2]*ws[m]).sum()
save('test_convinteger_mine','ConvInteger',[x,w,xz,wz],[y],dict(pads=[1,1,1,1]),opset=13)
# AveragePool ceil + count_include_pad + SAME_LOWER conv
x=rng.standard_normal((1,1,5,5)).astype(np.float32)
xp=np.pad(x,((0,0),(0,0),(1,1),(1,1)))
# k3 s2 pads1 ceil: out = ceil((5+2-3)/2)+1=3
y=np.zeros((1,1,3,3),np.float32)
for i in range(3):
  for j in range(3):
    y[0,0,i,j]=xp[0,0,i*2:i*2+3,j*2:j*2+3].sum()/9
save('test_avgpool_mine','AveragePool',[x],[y],dict(kernel_shape=[3,3],strides=[2,2],pads=[1,1,1,1],ceil_mode=1,count_include_pad=1),opset=13)
# BatchNorm opset 15 training, 3D, float64
x=rng.standard_normal((2,3,4)).astype(np.float64)
sc,bb,mn,vr=[rng.random(3).astype(np.float64) for _ in range(4)]
mm=x.mean(axis=(0,2)); vv=x.var(axis=(0,2))
y=(x-mm[None,:,None])/np.sqrt(vv[None,:,None]+1e-5)*sc[None,:,None]+bb[None,:,None]
save('test_bn_train_mine','BatchNormalization',[x,sc,bb,mn,vr],[y,mn*0.9+mm*0.1,vr*0.9+vv*0.1],dict(training_mode=1),opset=15)
# LayerNorm axis=1 no bias, 
x=rng.standard_normal((2,3,4)).astype(np.float32); sc=rng.standard_normal((4,)).astype(np.float32)
mu=x.mean(axis=(1,2),keepdims=True); isd=1/np.sqrt(x.var(axis=(1,2),keepdims=True)+1e-5)
save('test_ln_mine','LayerNormalization',[x,sc],[((x-mu)*isd*sc).astype(np.float32),mu.astype(np.float32),isd.astype(np.float32)],dict(axis=1),opset=17)
