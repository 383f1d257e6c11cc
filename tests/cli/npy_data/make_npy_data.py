#!/usr/bin/python3
# Writes the .npy files that tests/cli/npy_test.cpp reads, with numpy itself
# (Debian's python3-numpy). Element i of every array is i % 7 (bool: i % 2),
# so that the test knows the values without a second copy of them.
# Run: /usr/bin/python3 tests/cli/npy_data/make_npy_data.py
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))


def values(dtype, shape):
    n = int(np.prod(shape))
    i = np.arange(n)
    return ((i % 2) if dtype == np.bool_ else (i % 7)).astype(dtype).reshape(shape)


def write(name, array, version=None):
    with open(os.path.join(here, name), "wb") as f:
        if version is None:
            np.save(f, array)  # what numpy picks: 1.0 for every array here
        else:
            np.lib.format.write_array(f, array, version=version)


for dtype, shape in [("float32", (2, 3)), ("float64", ()), ("float16", (5,)), ("int8", (3, 1)), ("uint8", (4,)),
                     ("int16", (2, 2)), ("uint16", (3,)), ("int32", (1, 2, 3)), ("uint32", (2,)), ("int64", (7,)),
                     ("uint64", (2, 1)), ("bool", (6,)), ("float32", (0, 3))]:
    suffix = "empty" if 0 in shape else "scalar" if shape == () else "x".join(map(str, shape))
    write(f"{dtype}_{suffix}.npy", values(np.dtype(dtype), shape))
write("int16_2x3_v2.npy", values(np.int16, (2, 3)), version=(2, 0))
write("float32_4_v3.npy", values(np.float32, (4,)), version=(3, 0))
# What Kiln refuses, as numpy writes it.
write("fortran_float32_2x3.npy", np.asfortranarray(values(np.float32, (2, 3))))
write("bigendian_float32_3.npy", values(np.dtype(">f4"), (3,)))
write("complex64_2.npy", values(np.complex64, (2,)))
write("structured_2.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
