#!/usr/bin/python3
"""Trains the demo model: a small classifier for the 8x8 handwritten digits
that ship with scikit-learn (Debian's python3-sklearn), exported to ONNX.

Writes, next to this script:
  digits.onnx        input "image" float32 [batch,1,8,8] (pixels 0..1),
                     output "probabilities" float32 [batch,10]
  digit.npy          one held-out image (1x1x8x8) for the demo
  test_images.npy    held-out images, test_labels.npy their labels (int64)

Run with /usr/bin/python3 (needs python3-sklearn, python3-onnx, python3-numpy).
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)  # pixels are 0..16
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)

    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=600, random_state=0)
    clf.fit(x_train.reshape(len(x_train), 64), y_train)
    accuracy = clf.score(x_test.reshape(len(x_test), 64), y_test)
    print(f"held-out accuracy: {accuracy:.3f} on {len(x_test)} images")

    w1, w2 = (w.astype(np.float32) for w in clf.coefs_)
    b1, b2 = (b.astype(np.float32) for b in clf.intercepts_)
    nodes = [
        helper.make_node("Flatten", ["image"], ["flat"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["hidden_pre"], name="dense1"),
        helper.make_node("Relu", ["hidden_pre"], ["hidden"], name="relu1"),
        helper.make_node("Gemm", ["hidden", "w2", "b2"], ["logits"], name="dense2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "digits",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        initializer=[numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, producer_name="kiln-examples", opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(HERE, "digits.onnx"))

    np.save(os.path.join(HERE, "digit.npy"), x_test[:1].reshape(1, 1, 8, 8))
    np.save(os.path.join(HERE, "test_images.npy"), x_test.reshape(-1, 1, 8, 8))
    np.save(os.path.join(HERE, "test_labels.npy"), y_test)
    print(f"demo image label: {y_test[0]}")


if __name__ == "__main__":
    main()
