import numpy as np, onnx, os
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
rng = np.random.default_rng(0)
I, H, T = 3, 4, 5
W = rng.standard_normal((1, H, I)).astype(np.float32) * 0.5
R = rng.standard_normal((1, H, H)).astype(np.float32) * 0.5
def rnn_ref(xs, h):
    ys = []
    for x in xs:
        h = np.tanh(x @ W[0].T + h @ R[0].T); ys.append(h)
    return h, np.stack(ys)
def save(name, graph, opset, ins, outs):
    m = h.make_model(graph, opset_imports=[h.make_opsetid('', opset)])
    d = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'control_flow', name); os.makedirs(d + '/test_data_set_0', exist_ok=True)
    onnx.save(m, d + '/model.onnx')
    for i, v in enumerate(ins): onnx.save_tensor(nh.from_array(v), f'{d}/test_data_set_0/input_{i}.pb')
    for i, v in enumerate(outs): onnx.save_tensor(nh.from_array(v), f'{d}/test_data_set_0/output_{i}.pb')
inits = [nh.from_array(W, 'W'), nh.from_array(R, 'R')]
x = rng.standard_normal((T, 1, 1, I)).astype(np.float32)   # scan over axis 0 -> [1,1,I]
h0 = rng.standard_normal((1, 1, H)).astype(np.float32)
def scan_body():
    return h.make_graph([h.make_node('RNN', ['xs', 'W', 'R', '', '', 'h_in'], ['y', 'h_out'], hidden_size=H)], 'body',
        [h.make_tensor_value_info('h_in', TP.FLOAT, [1,1,H]), h.make_tensor_value_info('xs', TP.FLOAT, [1,1,I])],
        [h.make_tensor_value_info('h_out', TP.FLOAT, [1,1,H]), h.make_tensor_value_info('y', TP.FLOAT, [1,1,1,H])], inits)
for name, kw, xin, rev_in, out_axis, rev_out in [
    ('test_cf_scan_fwd', {}, x, False, 0, False),
    ('test_cf_scan_rev', dict(scan_input_directions=[1], scan_output_directions=[1]), x, True, 0, True),
    ('test_cf_scan_axis', dict(scan_input_axes=[2], scan_output_axes=[-1]), x.transpose(1,2,0,3).copy(), False, 4, False),
]:
    g = h.make_graph([h.make_node('Scan', ['h0', 'x'], ['hT', 'ys'], body=scan_body(), num_scan_inputs=1, **kw)], name,
        [h.make_tensor_value_info('h0', TP.FLOAT, [1,1,H]), h.make_tensor_value_info('x', TP.FLOAT, list(xin.shape))],
        [h.make_tensor_value_info('hT', TP.FLOAT, None), h.make_tensor_value_info('ys', TP.FLOAT, None)])
    seq = x[::-1] if rev_in else x
    hT, ys = rnn_ref([s.reshape(1, I) for s in seq], h0.reshape(1, H))
    ys = ys.reshape(T, 1, 1, 1, H)
    if rev_out: ys = ys[::-1]
    if out_axis == 4: ys = np.moveaxis(ys, 0, 4)
    save(name, g, 11, [h0, xin], [hT.reshape(1,1,H), np.ascontiguousarray(ys)])
# opset 8 scan: batch axis 0, seq axis 1, sequence_lens
B = 2
x8 = rng.standard_normal((B, T, 1, 1, I)).astype(np.float32)
h8 = rng.standard_normal((B, 1, 1, H)).astype(np.float32)
lens = np.array([5, 3], np.int64)
g = h.make_graph([h.make_node('Scan', ['lens', 'h0', 'x'], ['hT', 'ys'], body=scan_body(), num_scan_inputs=1, directions=[1])], 'scan8',
    [h.make_tensor_value_info('lens', TP.INT64, [B]), h.make_tensor_value_info('h0', TP.FLOAT, [B,1,1,H]), h.make_tensor_value_info('x', TP.FLOAT, [B,T,1,1,I])],
    [h.make_tensor_value_info('hT', TP.FLOAT, None), h.make_tensor_value_info('ys', TP.FLOAT, None)])
hs, yss = [], []
for b in range(B):
    seq = x8[b, :lens[b]][::-1]
    hT, ys = rnn_ref([s.reshape(1, I) for s in seq], h8[b].reshape(1, H))
    hs.append(hT.reshape(1,1,H)); yy = np.zeros((T,1,1,1,H), np.float32); yy[:lens[b]] = ys.reshape(-1,1,1,1,H); yss.append(yy)
save('test_cf_scan8', g, 8, [lens, h8, x8], [np.stack(hs), np.stack(yss)])
# Loop: M iterations of RNN on a constant input, cond passed through.
xc = rng.standard_normal((1, 1, I)).astype(np.float32)
body = h.make_graph([h.make_node('RNN', ['xc', 'W', 'R', '', '', 'h_in'], ['y', 'h_out'], hidden_size=H)], 'lbody',
    [h.make_tensor_value_info('it', TP.INT64, []), h.make_tensor_value_info('c_in', TP.BOOL, []), h.make_tensor_value_info('h_in', TP.FLOAT, [1,1,H])],
    [h.make_tensor_value_info('c_in', TP.BOOL, []), h.make_tensor_value_info('h_out', TP.FLOAT, [1,1,H]), h.make_tensor_value_info('y', TP.FLOAT, [1,1,1,H])],
    [nh.from_array(xc, 'xc')] + inits)
for name, M, cond, n in [('test_cf_loop3', 3, True, 3), ('test_cf_loop0', 0, True, 0), ('test_cf_loop_condfalse', 4, False, 0)]:
    g = h.make_graph([h.make_node('Loop', ['M', 'cond', 'h0'], ['hT', 'ys'], body=body)], name,
        [h.make_tensor_value_info('M', TP.INT64, []), h.make_tensor_value_info('cond', TP.BOOL, []), h.make_tensor_value_info('h0', TP.FLOAT, [1,1,H])],
        [h.make_tensor_value_info('hT', TP.FLOAT, None), h.make_tensor_value_info('ys', TP.FLOAT, None)])
    hT, ys = rnn_ref([xc.reshape(1, I)] * n, h0.reshape(1, H)) if n else (h0.reshape(1,H), np.zeros((0,), np.float32))
    save(name, g, 11, [np.array(M, np.int64), np.array(cond), h0], [hT.reshape(1,1,H), ys.reshape(n,1,1,1,H)])
