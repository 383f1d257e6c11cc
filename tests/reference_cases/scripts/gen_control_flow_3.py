import numpy as np, onnx, os
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
rng = np.random.default_rng(1)
def save(name, graph, opset, ins, outs):
    m = h.make_model(graph, opset_imports=[h.make_opsetid('', opset)])
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'control_flow', name); os.makedirs(d + '/test_data_set_0', exist_ok=True)
    onnx.save(m, d + '/model.onnx')
    for i, v in enumerate(ins): onnx.save_tensor(nh.from_array(v), f'{d}/test_data_set_0/input_{i}.pb')
    for i, v in enumerate(outs): onnx.save_tensor(nh.from_array(v), f'{d}/test_data_set_0/output_{i}.pb')
sig = lambda x: 1/(1+np.exp(-x))
acts = {'Sigmoid': lambda a,b: sig, 'Tanh': lambda a,b: np.tanh, 'HardSigmoid': lambda a,b: (lambda x: np.clip(a*x+b,0,1)),
        'ScaledTanh': lambda a,b: (lambda x: a*np.tanh(b*x)), 'LeakyRelu': lambda a,b: (lambda x: np.where(x>=0,x,a*x))}
T, B, I, H = 4, 3, 2, 3
X = rng.standard_normal((T,B,I)).astype(np.float32)
W = rng.standard_normal((2,4*H,I)).astype(np.float32)*.5
R = rng.standard_normal((2,4*H,H)).astype(np.float32)*.5
Bi = rng.standard_normal((2,8*H)).astype(np.float32)*.5
lens = np.array([4,2,3], np.int32)
h0 = rng.standard_normal((2,B,H)).astype(np.float32)
c0 = rng.standard_normal((2,B,H)).astype(np.float32)
P = rng.standard_normal((2,3*H)).astype(np.float32)*.5
names = ['HardSigmoid','ScaledTanh','LeakyRelu','Sigmoid','Tanh','Tanh']
alpha = [0.3, 0.9, 0.05]; beta=[0.4, 1.1]
fs = [acts['HardSigmoid'](0.3,0.4), acts['ScaledTanh'](0.9,1.1), acts['LeakyRelu'](0.05,0), sig, np.tanh, np.tanh]
clip = 2.0
Y = np.zeros((T,2,B,H),np.float32); Yh=np.zeros((2,B,H),np.float32); Yc=np.zeros((2,B,H),np.float32)
for d in range(2):
    f,g,hh = fs[3*d:3*d+3]
    for b in range(B):
        hv, cv = h0[d,b].astype(np.float64), c0[d,b].astype(np.float64)
        L = lens[b]; ts = range(L) if d==0 else range(L-1,-1,-1)
        for t in ts:
            gates = W[d]@X[t,b] + R[d]@hv + Bi[d,:4*H] + Bi[d,4*H:]
            gi,go,gf,gc = np.split(gates,4)
            cl = lambda v: np.clip(v,-clip,clip)
            i = f(cl(gi + P[d,:H]*cv)); fg = f(cl(gf + P[d,2*H:]*cv)); cc = g(cl(gc))
            cv = fg*cv + i*cc; o = f(cl(go + P[d,H:2*H]*cv)); hv = o*hh(cv)
            Y[t,d,b] = hv
        Yh[d,b]=hv; Yc[d,b]=cv
node = h.make_node('LSTM', ['X','W','R','B','lens','h0','c0','P'], ['Y','Yh','Yc'], hidden_size=H, direction='bidirectional',
                   activations=names, activation_alpha=alpha, activation_beta=beta, clip=clip)
ins = [X,W,R,Bi,lens,h0,c0,P]; nm=['X','W','R','B','lens','h0','c0','P']
g = h.make_graph([node], 'lstm', [h.make_tensor_value_info(n, TP.INT32 if n=='lens' else TP.FLOAT, list(v.shape)) for n,v in zip(nm,ins)],
                 [h.make_tensor_value_info(n, TP.FLOAT, None) for n in ['Y','Yh','Yc']])
save('test_cf_lstm_full', g, 7, ins, [Y,Yh,Yc])
# layout=1 variant
node = h.make_node('LSTM', ['X','W','R','B','lens','h0','c0','P'], ['Y','Yh','Yc'], hidden_size=H, direction='bidirectional',
                   activations=names, activation_alpha=alpha, activation_beta=beta, clip=clip, layout=1)
ins1 = [X.transpose(1,0,2).copy(),W,R,Bi,lens,h0.transpose(1,0,2).copy(),c0.transpose(1,0,2).copy(),P]
g = h.make_graph([node], 'lstm1', [h.make_tensor_value_info(n, TP.INT32 if n=='lens' else TP.FLOAT, list(v.shape)) for n,v in zip(nm,ins1)],
                 [h.make_tensor_value_info(n, TP.FLOAT, None) for n in ['Y','Yh','Yc']])
save('test_cf_lstm_layout', g, 14, ins1, [Y.transpose(2,0,1,3).copy(), Yh.transpose(1,0,2).copy(), Yc.transpose(1,0,2).copy()])
# GRU linear_before_reset, reverse
Wg = W[:1,:3*H]; Rg = R[:1,:3*H]; Bg = np.concatenate([Bi[:1,:3*H], Bi[:1,4*H:7*H]],1)
Yg = np.zeros((T,1,B,H),np.float32); Yhg = np.zeros((1,B,H),np.float32)
for b in range(B):
    hv = h0[0,b].astype(np.float64)
    for t in range(T-1,-1,-1):
        z = sig(Wg[0,:H]@X[t,b] + Rg[0,:H]@hv + Bg[0,:H] + Bg[0,3*H:4*H])
        r = sig(Wg[0,H:2*H]@X[t,b] + Rg[0,H:2*H]@hv + Bg[0,H:2*H] + Bg[0,4*H:5*H])
        n = np.tanh(Wg[0,2*H:]@X[t,b] + Bg[0,2*H:3*H] + r*(Rg[0,2*H:]@hv + Bg[0,5*H:]))
        hv = (1-z)*n + z*hv; Yg[t,0,b]=hv
    Yhg[0,b]=hv
node = h.make_node('GRU', ['X','W','R','B','','h0'], ['Y','Yh'], hidden_size=H, direction='reverse', linear_before_reset=1)
ins = [X,Wg,Rg,Bg,h0[:1]]; nm=['X','W','R','B','h0']
g = h.make_graph([node], 'gru', [h.make_tensor_value_info(n, TP.FLOAT, list(v.shape)) for n,v in zip(nm,ins)],
                 [h.make_tensor_value_info(n, TP.FLOAT, None) for n in ['Y','Yh']])
save('test_cf_gru_lbr', g, 7, ins, [Yg,Yhg])
