import numpy as np, onnx, os, shutil
from onnx import helper, numpy_helper, TensorProto
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tensor')
shutil.rmtree(root, ignore_errors=True)
rng = np.random.default_rng(0)
T = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
     np.float16: TensorProto.FLOAT16, np.bool_: TensorProto.BOOL, np.float64: TensorProto.DOUBLE, np.uint8: TensorProto.UINT8}
def make(name, op, inputs, outputs, opset, **attrs):
    d = os.path.join(root, name, 'test_data_set_0'); os.makedirs(d)
    ins = []; innames = []
    for i, a in enumerate(inputs):
        if a is None: innames.append(''); continue
        n = f'in{i}'; innames.append(n)
        ins.append(helper.make_tensor_value_info(n, T[a.dtype.type], a.shape))
        open(f'{d}/input_{len(ins)-1}.pb', 'wb').write(numpy_helper.from_array(a, n).SerializeToString())
    outs = []
    for i, a in enumerate(outputs):
        n = f'out{i}'
        outs.append(helper.make_tensor_value_info(n, T[a.dtype.type], a.shape))
        open(f'{d}/output_{i}.pb', 'wb').write(numpy_helper.from_array(a, n).SerializeToString())
    node = helper.make_node(op, innames, [o.name for o in outs], **attrs)
    g = helper.make_graph([node], name, ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid('', opset)])
    m.ir_version = 8
    open(os.path.join(root, name, 'model.onnx'), 'wb').write(m.SerializeToString())

x = rng.standard_normal((2, 3, 4)).astype(np.float32)
i64 = lambda *v: np.array(v, dtype=np.int64)
# Pad modes, opset 11 inputs and opset 2 attributes, negative pads
for mode in ['constant', 'reflect', 'edge']:
    pads = i64(0, 1, 2, 0, 2, 1)
    npp = [(0, 0), (1, 2), (2, 1)]
    exp = np.pad(x, npp, mode=mode) if mode != 'constant' else np.pad(x, npp, constant_values=1.5)
    make(f'pad11_{mode}', 'Pad', [x, pads, np.array(1.5, np.float32)] if mode == 'constant' else [x, pads], [exp], 13, mode=mode)
    make(f'pad2_{mode}', 'Pad', [x], [exp], 2, mode=mode, pads=list(pads), value=1.5)
make('pad_negative', 'Pad', [x, i64(0, -1, 1, 0, 0, -1)], [np.pad(x, [(0,0),(0,0),(1,0)])[:, 1:, :-1]], 13)
make('pad18_axes', 'Pad', [x, i64(1, 2, 0, 3), np.array(0, np.float32), i64(-1, 1)], [np.pad(x, [(0,0),(2,3),(1,0)])], 18)
make('pad_int', 'Pad', [np.arange(6, dtype=np.int32).reshape(2,3), i64(1,1,1,1)], [np.pad(np.arange(6, dtype=np.int32).reshape(2,3), 1, mode='reflect')], 13, mode='reflect')
# Split
y = np.arange(10, dtype=np.float32)
make('split18_num_outputs', 'Split', [y], [y[0:4], y[4:8], y[8:10]], 18, num_outputs=3)
make('split13_input', 'Split', [y, i64(3, 7)], [y[:3], y[3:]], 13)
make('split11_attr', 'Split', [x], [x[:, :1], x[:, 1:]], 11, axis=1, split=[1, 2])
# CenterCropPad
z = rng.standard_normal((5, 4, 3)).astype(np.float32)
exp = np.zeros((3, 7, 3), np.float32); exp[:, 1:5, :] = z[1:4]
make('center_crop_pad', 'CenterCropPad', [z, i64(3, 7)], [exp], 18, axes=[0, 1])
# ScatterElements reductions
data = rng.standard_normal((3, 4)).astype(np.float32)
idx = i64(*[[1, 0, 2, 1]]).reshape(1, 4); idx = np.array([[1, 0, 1, 1], [1, 2, 0, 1]], np.int64)
upd = rng.standard_normal((2, 4)).astype(np.float32)
for red, f in [('add', np.add), ('mul', np.multiply), ('max', np.maximum), ('min', np.minimum)]:
    e = data.copy()
    for a in range(2):
        for b in range(4):
            e[idx[a, b], b] = f(e[idx[a, b], b], upd[a, b])
    make(f'scatter_elements_{red}', 'ScatterElements', [data, idx, upd], [e], 18, axis=0, reduction=red)
e = data.copy(); e[1] = np.maximum(e[1], upd[0]); e[0] = np.maximum(e[0], upd[1])
make('scatternd_max', 'ScatterND', [data, i64(1, 0).reshape(2, 1), upd], [e], 18, reduction='max')
# GatherND batch_dims=2
gd = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
gi = rng.integers(-4, 4, size=(2, 3, 6, 1)).astype(np.int64)
ge = np.zeros((2, 3, 6, 5), np.float32)
for a in range(2):
    for b in range(3):
        for c in range(6): ge[a, b, c] = gd[a, b, gi[a, b, c, 0]]
make('gathernd_batch2', 'GatherND', [gd, gi], [ge], 13, batch_dims=2)
gi2 = np.array([[[0, 1], [2, 3]], [[1, 0], [0, 4]]], np.int64)  # (2,2,2) batch 1 -> out (2,2)
ge2 = np.array([[gd[0, 0, 1], gd[0, 2, 3]], [gd[1, 1, 0], gd[1, 0, 4 % 4]]]) if False else None
# Gather with axis 1 and 2-D indices, negative
gI = np.array([[0, -1], [2, 1]], np.int64)
make('gather_axis1', 'Gather', [x, gI], [np.take(x, gI, axis=1)], 13, axis=1)
# Slice negative steps with INT64 bounds, opset 1 attributes
s = rng.standard_normal((5, 6)).astype(np.float32)
make('slice_neg_all', 'Slice', [s, i64(-1, 5), i64(-2**63, -100), i64(0, 1), i64(-2, -3)], [s[::-2, 5::-3]], 13)
make('slice_v1', 'Slice', [s], [s[1:3, -4:]], 1, starts=[1, -4], ends=[3, 1000], axes=[0, 1])
# TopK largest/smallest with ties, float16
t = np.array([[3, 1, 3, 2, 1], [0, 0, 5, 5, 1]], np.float32)
make('topk_ties', 'TopK', [t, i64(3)], [np.array([[3, 3, 2], [5, 5, 1]], np.float32), np.array([[0, 2, 3], [2, 3, 4]], np.int64)], 11)
make('topk_small_axis0_v1', 'TopK', [t], [np.array([[3, 1, 5, 5, 1]], np.float32), np.array([[0, 0, 1, 1, 0]], np.int64)], 1, k=1, axis=0)
make('topk_f16', 'TopK', [t.astype(np.float16), i64(2)], [np.array([[3, 3], [5, 5]], np.float16), np.array([[0, 2], [2, 3]], np.int64)], 11)
# Unique with axis, unsorted order
u = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4], [0, 1, 1]], np.float32)
vals, first, inv, cnt = np.unique(u, axis=0, return_index=True, return_inverse=True, return_counts=True)
make('unique_axis0', 'Unique', [u], [vals, first.astype(np.int64), inv.reshape(-1).astype(np.int64), cnt.astype(np.int64)], 11, axis=0, sorted=1)
# CumSum int32 reverse exclusive on axis 0
c = np.arange(12, dtype=np.int32).reshape(3, 4)
make('cumsum_int_rev_excl', 'CumSum', [c, np.array(0, np.int32)], [np.flip(np.cumsum(np.flip(c, 0), 0) - np.flip(c, 0), 0).astype(np.int32)], 14, exclusive=1, reverse=1)
# Expand with fewer dims in shape, Tile int, Where bool
make('expand_lower_rank', 'Expand', [np.ones((3, 1), np.float32) * np.arange(3, dtype=np.float32)[:, None], i64(2, 1, 4)], [np.broadcast_to(np.arange(3, dtype=np.float32)[:, None], (2, 3, 4)).copy()], 13)
make('where_bcast_int', 'Where', [np.array([True, False, True]), np.arange(6, dtype=np.int64).reshape(2, 3), np.array(-1, np.int64)], [np.where([True, False, True], np.arange(6).reshape(2, 3), -1).astype(np.int64)], 16)
# Squeeze/Unsqueeze old attribute form, Reshape with allowzero and empty
make('squeeze_v11', 'Squeeze', [np.zeros((1, 3, 1), np.float32)], [np.zeros((3, 1), np.float32)], 11, axes=[0])
make('unsqueeze_v11', 'Unsqueeze', [np.zeros((3,), np.float32)], [np.zeros((1, 3, 1), np.float32)], 11, axes=[0, -1])
make('reshape_allowzero_empty', 'Reshape', [np.zeros((0, 3), np.float32), i64(3, 0)], [np.zeros((3, 0), np.float32)], 14, allowzero=1)
make('reshape_v1', 'Reshape', [x], [x.reshape(6, 4)], 1, shape=[6, -1])
make('concat_v1_default', 'Concat', [x, x], [np.concatenate([x, x], 1)], 1)
# DepthToSpace / SpaceToDepth round trip with numpy definitions
d = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
b = 2
tmp = d.reshape(2, b, b, 2, 3, 2).transpose(0, 3, 4, 1, 5, 2).reshape(2, 2, 6, 4)
make('d2s_dcr', 'DepthToSpace', [d], [tmp], 13, blocksize=2, mode='DCR')
tmp = d.reshape(2, 2, b, b, 3, 2).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 6, 4)
make('d2s_crd', 'DepthToSpace', [d], [tmp], 13, blocksize=2, mode='CRD')
sd = rng.standard_normal((1, 3, 4, 6)).astype(np.float32)
tmp = sd.reshape(1, 3, 2, b, 3, b).transpose(0, 3, 5, 1, 2, 4).reshape(1, 12, 2, 3)
make('s2d', 'SpaceToDepth', [sd], [tmp], 13, blocksize=2)
# OneHot float indices with depth float, EyeLike, Range int64 and float
make('onehot_float', 'OneHot', [np.array([[1., -1.], [0., 5.]], np.float32), np.array(3., np.float32), np.array([0, 7], np.int64)],
     [np.array([[[0, 7, 0], [0, 0, 7]], [[7, 0, 0], [0, 0, 0]]], np.int64).transpose(0, 2, 1)], 11, axis=1)
make('eyelike_neg_k', 'EyeLike', [np.zeros((3, 4), np.int32)], [np.eye(3, 4, k=-1, dtype=np.float32)], 9, k=-1, dtype=1)
make('range_int64', 'Range', [np.array(10, np.int64), np.array(-3, np.int64), np.array(-4, np.int64)], [np.arange(10, -3, -4, dtype=np.int64)], 11)
# Compress axis 1, NonZero int, ReverseSequence, Trilu int with k input
make('compress_axis1', 'Compress', [x, np.array([False, True, True])], [x[:, 1:]], 11, axis=1)
nz = np.array([[0, 2, 0], [3, 0, 0]], np.int32)
make('nonzero_int', 'NonZero', [nz], [np.array(np.nonzero(nz), np.int64)], 13)
make('triu_k_int', 'Trilu', [np.arange(20, dtype=np.int64).reshape(4, 5), i64(1).reshape(())], [np.triu(np.arange(20).reshape(4, 5), 1).astype(np.int64)], 14)
make('dropout_v6_test', 'Dropout', [x], [x], 6, is_test=1)
make('dropout_12_mask', 'Dropout', [x, np.array(0.3, np.float32), np.array(False)], [x, np.ones(x.shape, bool)], 13)
make('constantofshape_int', 'ConstantOfShape', [i64(2, 3)], [np.full((2, 3), 7, np.int32)], 9, value=numpy_helper.from_array(np.array([7], np.int32)))
make('shape_start_end', 'Shape', [x], [i64(3, 4)], 15, start=-2, end=10)
make('flatten_axis0_v1', 'Flatten', [x], [x.reshape(1, -1)], 1, axis=0)
make('transpose_perm', 'Transpose', [x.astype(np.float16)], [x.astype(np.float16).transpose(1, 2, 0)], 13, perm=[1, 2, 0])
