import numpy as np, onnx, os
from onnx import helper, numpy_helper, TensorProto
root=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'quantization')
rng=np.random.default_rng(0)
def case(name, op, inputs, outputs, attrs={}, opset=13, in_names=None):
    d=os.path.join(root,name); os.makedirs(os.path.join(d,'test_data_set_0'),exist_ok=True)
    in_names = in_names or [f'i{k}' for k in range(len(inputs))]
    node=helper.make_node(op,[n for n in in_names],[f'o{k}' for k in range(len(outputs))],**attrs)
    vi=lambda n,a: helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype) if hasattr(helper,'np_dtype_to_tensor_dtype') else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[a.dtype], a.shape)
    real=[(n,a) for n,a in zip(in_names,inputs) if n]
    g=helper.make_graph([node],name,[vi(n,a) for n,a in real],[vi(f'o{k}',a) for k,a in enumerate(outputs)])
    m=helper.make_model(g,opset_imports=[helper.make_opsetid('',opset)])
    onnx.save(m,os.path.join(d,'model.onnx'))
    for k,(n,a) in enumerate(real):
        open(os.path.join(d,'test_data_set_0',f'input_{k}.pb'),'wb').write(numpy_helper.from_array(a,n).SerializeToString())
    for k,a in enumerate(outputs):
        open(os.path.join(d,'test_data_set_0',f'output_{k}.pb'),'wb').write(numpy_helper.from_array(np.asarray(a),f'o{k}').SerializeToString())
f32=lambda *s: rng.standard_normal(s).astype(np.float32)
# Einsum
for nm,eq,ops in [('ell_bcast','...ij,...jk->...ik',[f32(2,1,3,4),f32(5,4,2)]),
                  ('implicit','ij,jk',[f32(3,4),f32(4,5)]),
                  ('implicit_ell','...ba',[f32(2,3,4)]),
                  ('diag','ii->i',[f32(4,4)]),('trace','ii',[f32(4,4)]),
                  ('outer','i,j->ij',[f32(3),f32(4)]),('three','ij,jk,kl->il',[f32(2,3),f32(3,4),f32(4,5)]),
                  ('bdiag','...ii->...i',[f32(2,3,3)]),('sum_all','ijk->',[f32(2,3,4)]),
                  ('upper','Ab,bC->AC',[f32(2,3),f32(3,2)])]:
    case('test_x_einsum_'+nm,'Einsum',ops,[np.einsum(eq,*ops).astype(np.float32)],{'equation':eq},opset=12)
ai=rng.integers(-50,50,(3,4)).astype(np.int32); bi=rng.integers(-50,50,(4,2)).astype(np.int32)
case('test_x_einsum_int','Einsum',[ai,bi],[np.einsum('ij,jk->ik',ai,bi).astype(np.int32)],{'equation':'ij,jk->ik'},opset=12)
ad=rng.standard_normal((2,3)); case('test_x_einsum_double','Einsum',[ad],[np.einsum('ij->ji',ad)],{'equation':'ij->ji'},opset=12)
# MatMulInteger
A=rng.integers(0,255,(2,3,4)).astype(np.uint8); B=rng.integers(-128,127,(4,5)).astype(np.int8)
az=rng.integers(0,255,(3,)).astype(np.uint8); bz=rng.integers(-128,127,(5,)).astype(np.int8)
exp=np.matmul(A.astype(np.int32)-az.astype(np.int32)[:,None],B.astype(np.int32)-bz.astype(np.int32)).astype(np.int32)
case('test_x_matmulinteger_rowcol','MatMulInteger',[A,B,az,bz],[exp],opset=10)
A2=rng.integers(-128,127,(3,4)).astype(np.int8); B2=rng.integers(0,255,(4,2)).astype(np.uint8)
case('test_x_matmulinteger_nozp','MatMulInteger',[A2,B2],[(A2.astype(np.int32)@B2.astype(np.int32))],opset=10)
# Quantize / Dequantize
x=f32(2,3,4)*10; sc=np.array([0.5,1.0,2.0],np.float32); zp=np.array([-3,0,5],np.int8)
q=np.clip(np.rint(x/sc[None,:,None])+zp[None,:,None],-128,127).astype(np.int8)
case('test_x_quantize_axis_int8','QuantizeLinear',[x,sc,zp],[q],opset=13)
sc2=np.array([0.5,2.0,1.5,3.0],np.float32); q2=np.clip(np.rint(x/sc2),0,255).astype(np.uint8)
case('test_x_quantize_neg_axis_nozp','QuantizeLinear',[x,sc2],[q2],{'axis':-1},opset=13)
xi=rng.integers(-1000,1000,(6,)).astype(np.int32); s=np.array(0.25,np.float32)
case('test_x_dequant_int32','DequantizeLinear',[xi,s],[(xi*s).astype(np.float32)],opset=10)
x8=rng.integers(-128,127,(2,3,2)).astype(np.int8)
case('test_x_dequant_axis_int8','DequantizeLinear',[x8,sc,zp],[((x8.astype(np.float32)-zp[None,:,None])*sc[None,:,None]).astype(np.float32)],opset=13)
# DynamicQuantizeLinear all-positive / all-negative
for nm,xx in [('pos',np.abs(f32(5))+1),('neg',-np.abs(f32(5))-1),('zeros',np.zeros(4,np.float32))]:
    mx=max(0,xx.max()); mn=min(0,xx.min()); ys=np.float32((mx-mn)/np.float32(255))
    zpv=np.uint8(np.clip(np.rint((0-mn)/ys),0,255)) if ys!=0 else np.uint8(0)
    y=np.clip(np.rint(xx/ys)+zpv,0,255).astype(np.uint8) if ys!=0 else np.zeros_like(xx,np.uint8)+zpv
    case('test_x_dynq_'+nm,'DynamicQuantizeLinear',[xx],[y,np.array(ys,np.float32),np.array(zpv,np.uint8)],opset=11)
# QLinearConv general (numpy reference)
def qconv(x,xs,xz,w,ws,wz,ys,yz,b,group,strides,pads,dil):
    N,C=x.shape[:2]; M=w.shape[0]; sp=x.ndim-2; k=w.shape[2:]
    xp=np.pad(x.astype(np.int64)-int(xz),[(0,0),(0,0)]+[(pads[i],pads[i+sp]) for i in range(sp)])
    wz=np.broadcast_to(np.asarray(wz,np.int64),(M,)); ws=np.broadcast_to(np.asarray(ws,np.float64),(M,))
    outs=[(xp.shape[2+i]-((k[i]-1)*dil[i]+1))//strides[i]+1 for i in range(sp)]
    y=np.zeros((N,M)+tuple(outs),np.float64); cg=C//group; mg=M//group
    for n in range(N):
      for m in range(M):
        g=m//mg; wm=w[m].astype(np.int64)-wz[m]
        for o in np.ndindex(*outs):
          sl=tuple(slice(o[i]*strides[i],o[i]*strides[i]+(k[i]-1)*dil[i]+1,dil[i]) for i in range(sp))
          acc=(xp[(n,slice(g*cg,(g+1)*cg))+sl]*wm).sum()+(b[m] if b is not None else 0)
          y[(n,m)+o]=acc*(xs*ws[m]/ys)
    info=np.iinfo(yz.dtype)
    return np.clip(np.rint(y)+int(yz),info.min,info.max).astype(yz.dtype)
X=rng.integers(0,255,(1,4,7,6)).astype(np.uint8); W=rng.integers(-128,127,(6,2,3,2)).astype(np.int8)
xs=np.float32(0.05); xz=np.uint8(128); ws=(rng.random(6)*0.02+0.005).astype(np.float32); wz=np.zeros(6,np.int8)
ys=np.float32(0.3); yz=np.uint8(100); b=rng.integers(-500,500,(6,)).astype(np.int32)
Y=qconv(X,xs,xz,W,ws,wz,ys,yz,b,2,[2,1],[1,0,1,1],[1,2])
case('test_x_qlinearconv_group_perchan','QLinearConv',[X,np.array(xs),np.array(xz),W,ws,wz,np.array(ys),np.array(yz),b],[Y],
     {'group':2,'strides':[2,1],'pads':[1,0,1,1],'dilations':[1,2]},opset=10)
X3=rng.integers(-128,127,(2,2,4,3,3)).astype(np.int8); W3=rng.integers(-128,127,(3,2,2,2,2)).astype(np.int8)
ys3=np.float32(2.0); yz3=np.int8(-5)
Y3=qconv(X3,np.float32(0.1),np.int8(3),W3,np.float32(0.02),np.int8(0),ys3,yz3,None,1,[1,1,1],[0,1,0,0,1,0],[1,1,1])
case('test_x_qlinearconv_3d_int8','QLinearConv',[X3,np.array(np.float32(0.1)),np.array(np.int8(3)),W3,np.array(np.float32(0.02)),np.array(np.int8(0)),np.array(ys3),np.array(yz3)],[Y3],
     {'pads':[0,1,0,0,1,0]},opset=10)
X1=rng.integers(0,255,(1,2,9)).astype(np.uint8); W1=rng.integers(0,255,(2,2,3)).astype(np.uint8)
Y1=qconv(X1,np.float32(0.02),np.uint8(10),W1,np.float32(0.01),np.uint8(128),np.float32(0.05),np.uint8(7),None,1,[2],[1,1],[1])
case('test_x_qlinearconv_1d','QLinearConv',[X1,np.array(np.float32(0.02)),np.array(np.uint8(10)),W1,np.array(np.float32(0.01)),np.array(np.uint8(128)),np.array(np.float32(0.05)),np.array(np.uint8(7))],[Y1],{'strides':[2],'pads':[1,1]},opset=10)
# QLinearMatMul int8, batch
qa=rng.integers(-128,127,(2,3,4)).astype(np.int8); qb=rng.integers(-128,127,(4,3)).astype(np.int8)
acc=(qa.astype(np.int64)-2)@(qb.astype(np.int64)+1)
qy=np.clip(np.rint(acc*(0.05*0.03/0.7))+(-4),-128,127).astype(np.int8)
case('test_x_qlinearmatmul_int8','QLinearMatMul',[qa,np.array(np.float32(0.05)),np.array(np.int8(2)),qb,np.array(np.float32(0.03)),np.array(np.int8(-1)),np.array(np.float32(0.7)),np.array(np.int8(-4))],[qy],opset=10)
# Det
D=rng.standard_normal((2,3,4,4)); case('test_x_det_double_batch','Det',[D],[np.linalg.det(D)],opset=11)
S=np.array([[1,2],[2,4]],np.float32); case('test_x_det_singular','Det',[S],[np.array(np.linalg.det(S),np.float32)],opset=11)
P=np.array([[0,1,0],[0,0,1],[1,0,0]],np.float32); case('test_x_det_perm','Det',[P],[np.array(1.0,np.float32)],opset=11)
