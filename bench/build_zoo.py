#!/usr/bin/python3
"""Builds the benchmark model zoo as ONNX files (bench time only, not CI).

Needs Debian's python3-torch, python3-torchvision and python3-onnx; run with
/usr/bin/python3. Weights are torchvision's random initialisation (nothing
can be downloaded here): the zoo measures speed and agreement between
backends, not accuracy.

  /usr/bin/python3 bench/build_zoo.py [OUT_DIR] [--only NAME,NAME] [--detectors] [--classifiers]

--detectors also writes torchvision's detection models to OUT_DIR/detectors/
(one 3x320x320 image; their post-processing has data-dependent shapes, so
they exercise the partitioner and the interpreter, see the README).
--classifiers also writes torchvision's other classification architectures
to OUT_DIR/classifiers/ (dynamic batch; random weights made informative, see
informative()): operators and patterns the zoo does
not have (DenseNet's BatchNormalization after a Concat, RegNet's grouped
convolutions with squeeze-and-excitation, vision transformers).
"""
import argparse
import os

import torch
import torchvision

torch.manual_seed(0)


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))

    def forward(self, x):
        return self.net(x)


class LeNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.classifier = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(400, 120), torch.nn.ReLU(),
            torch.nn.Linear(120, 84), torch.nn.ReLU(), torch.nn.Linear(84, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class Encoder(torch.nn.Module):
    def __init__(self, vocab=1000, d_model=256, heads=4, layers=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d_model)
        layer = torch.nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model,
                                                 activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, tokens):
        return self.encoder(self.embed(tokens))


class Segmenter(torch.nn.Module):
    """torchvision's segmentation models return a dict; ONNX wants the tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class Recurrent(torch.nn.Module):
    """A speech-style tagger: a recurrent stack over [batch, time, 40] features."""

    def __init__(self, kind):
        super().__init__()
        if kind == "lstm":
            self.rnn = torch.nn.LSTM(40, 128, num_layers=2, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(256, 10)
        else:
            self.rnn = torch.nn.GRU(40, 96, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(96, 10)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class UNet(torch.nn.Module):
    """Two levels down, transposed convolutions up, skip connections joined by Concat."""

    def __init__(self):
        super().__init__()
        block = lambda i, o: torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.BatchNorm2d(o), torch.nn.ReLU())
        self.d1, self.d2, self.d3 = block(3, 16), block(16, 32), block(32, 64)
        self.u2, self.c2 = torch.nn.ConvTranspose2d(64, 32, 2, stride=2), block(64, 32)
        self.u1, self.c1 = torch.nn.ConvTranspose2d(32, 16, 2, stride=2), block(32, 16)
        self.out = torch.nn.Conv2d(16, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(torch.nn.functional.max_pool2d(a, 2))
        c = self.d3(torch.nn.functional.max_pool2d(b, 2))
        y = self.c2(torch.cat([self.u2(c), b], 1))
        return self.out(self.c1(torch.cat([self.u1(y), a], 1)))


class AudioConv(torch.nn.Module):
    """1-D convolutions over a raw 16 kHz waveform, with GroupNorm and GELU."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(nn.Conv1d(1, 32, 80, stride=4), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4),
                                 nn.Conv1d(32, 64, 3, padding=1), nn.GroupNorm(8, 64), nn.GELU(), nn.MaxPool1d(4),
                                 nn.Conv1d(64, 64, 3, padding=2, dilation=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
                                 nn.Flatten(), nn.Linear(64, 35))

    def forward(self, x):
        return self.net(x)


class VoiceActivity(torch.nn.Module):
    """A voice-activity detector in the shape of exported ones: an If on the
    sample-rate input picks one of two stacks of 1-D convolutions (8 kHz
    audio takes smaller strides), then an LSTM cell carries state from chunk
    to chunk (state in, state out)."""

    def __init__(self):
        super().__init__()
        nn = torch.nn

        def stack(stride):
            return nn.Sequential(nn.Conv1d(1, 32, 8, stride=stride), nn.ReLU(), nn.Conv1d(32, 64, 3, stride=2), nn.ReLU(),
                                 nn.Conv1d(64, 64, 3, stride=2), nn.ReLU())
        self.wide, self.narrow = stack(4), stack(2)
        self.cell = nn.LSTMCell(64, 64)
        self.head = nn.Linear(64, 1)

    def forward(self, x, sr, h, c):
        if bool(sr == 16000):
            f = self.wide(x).mean(dim=2)
        else:
            f = self.narrow(x).mean(dim=2)
        h, c = self.cell(f, (h, c))
        return torch.sigmoid(self.head(h)), h, c


class LoopRefiner(torch.nn.Module):
    """Refinement steps written as a Python loop whose count comes from the
    input's shape (one step per 16 features), which a scripted export keeps
    as a Loop: h = tanh(h W + x W'), the steps' sum carried along."""

    def __init__(self):
        super().__init__()
        self.state = torch.nn.Linear(128, 128)
        self.input = torch.nn.Linear(128, 128)

    def forward(self, x):
        h = torch.zeros_like(x)
        total = torch.zeros_like(x)
        drive = self.input(x)
        for _ in range(x.shape[1] // 16):
            h = torch.tanh(self.state(h) + drive)
            total = total + h
        return total


def export_control_flow(out):
    """The control-flow models of --others, exported scripted so that their
    branch and loop stay If and Loop nodes."""
    with torch.no_grad():
        vad = torch.jit.script(VoiceActivity().eval())
        h = torch.zeros(1, 64)
        torch.onnx.export(vad, (torch.randn(1, 1, 512), torch.tensor(16000), h, h), os.path.join(out, "voice_activity.onnx"),
                          input_names=["input", "sr", "h", "c"], output_names=["output", "h_out", "c_out"], opset_version=17)
        loop = torch.jit.script(LoopRefiner().eval())
        torch.onnx.export(loop, (torch.randn(1, 128),), os.path.join(out, "loop_refiner.onnx"), input_names=["input"],
                          output_names=["output"], opset_version=17)
    print(f"wrote {out}/voice_activity.onnx and loop_refiner.onnx")


def export(model, example, path, input_name, dynamic):
    model.eval()
    torch.onnx.export(model, example, path, input_names=[input_name], output_names=["output"],
                      dynamic_axes={input_name: dynamic, "output": {0: "batch"}}, opset_version=17,
                      do_constant_folding=True)
    print(f"wrote {path}")


def informative(model, shape):
    """Random weights whose outputs say something about the inputs. As
    initialised, ViT's head is zeros (every output 0), and BatchNorms keep
    their initial statistics (mean 0, variance 1), so activations shrink layer
    by layer: mobilenet_v3_small's outputs were about 1e-9 and inception_v3's
    differed between inputs by 1e-7 of their size, so comparing backends'
    outputs said little about the layers before the last. Parameters that are
    all zeros get small random values, and every BatchNorm's statistics are
    measured on random images (as calibrating them on data would)."""
    with torch.no_grad():
        for p in model.parameters():
            if not torch.any(p):
                p.normal_(0, 0.02)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a plain average over the batches below
        if norms:
            model.train()
            for _ in range(2):
                model(torch.randn(8, *shape))
    model.eval()
    return model


def export_detector(model, path):
    model.eval()
    torch.onnx.export(model, ([torch.rand(3, 320, 320)],), path, input_names=["image"],
                      output_names=["boxes", "scores", "labels"], opset_version=13)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?", default=os.path.join(os.path.dirname(__file__), "models"))
    parser.add_argument("--only", default="")
    parser.add_argument("--detectors", action="store_true")
    parser.add_argument("--classifiers", action="store_true")
    parser.add_argument("--others", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    image = torch.randn(1, 3, 224, 224)
    zoo = {
        "mlp": (Mlp(), torch.randn(1, 1, 28, 28), "input", {0: "batch"}),
        "lenet": (LeNet(), torch.randn(1, 1, 28, 28), "input", {0: "batch"}),
        "squeezenet1_1": (torchvision.models.squeezenet1_1(), image, "input", {0: "batch"}),
        "mobilenet_v2": (torchvision.models.mobilenet_v2(), image, "input", {0: "batch"}),
        "resnet18": (torchvision.models.resnet18(), image, "input", {0: "batch"}),
        "resnet50": (torchvision.models.resnet50(), image, "input", {0: "batch"}),
        "efficientnet_b0": (torchvision.models.efficientnet_b0(), image, "input", {0: "batch"}),
        "encoder": (Encoder(), torch.randint(0, 1000, (1, 128)), "tokens", {0: "batch", 1: "sequence"}),
    }
    for name, (model, example, input_name, dynamic) in zoo.items():
        if only and name not in only:
            continue
        # Exported with autograd on: under no_grad the transformer layers take a
        # fused fast path that has no ONNX export.
        export(model, example, os.path.join(args.out, name + ".onnx"), input_name, dynamic)
    if args.detectors:
        detection = torchvision.models.detection
        os.makedirs(os.path.join(args.out, "detectors"), exist_ok=True)
        for name, make in [("ssdlite320_mobilenet_v3_large", detection.ssdlite320_mobilenet_v3_large),
                           ("fasterrcnn_mobilenet_v3_large_320_fpn", detection.fasterrcnn_mobilenet_v3_large_320_fpn),
                           ("retinanet_resnet50_fpn", detection.retinanet_resnet50_fpn)]:
            if not only or name in only:
                export_detector(make(weights=None, weights_backbone=None),
                                os.path.join(args.out, "detectors", name + ".onnx"))
    if args.classifiers:
        os.makedirs(os.path.join(args.out, "classifiers"), exist_ok=True)
        for name in ["alexnet", "densenet121", "googlenet", "inception_v3", "shufflenet_v2_x1_0", "mnasnet1_0",
                     "mobilenet_v3_small", "regnet_y_400mf", "resnext50_32x4d", "efficientnet_v2_s", "convnext_tiny",
                     "vit_b_16", "swin_t"]:
            if only and name not in only:
                continue
            # Without their auxiliary classifiers, which only training uses.
            extra = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
            side = 299 if name == "inception_v3" else 224
            export(informative(getattr(torchvision.models, name)(weights=None, **extra), (3, side, side)), torch.randn(1, 3, side, side),
                   os.path.join(args.out, "classifiers", name + ".onnx"), "input", {0: "batch"})

    if args.others:
        os.makedirs(os.path.join(args.out, "others"), exist_ok=True)
        segmentation, video = torchvision.models.segmentation, torchvision.models.video
        others = {
            "unet_small": (UNet, (3, 128, 128), {0: "batch"}),
            "audio_conv1d": (AudioConv, (1, 16000), {0: "batch"}),
            "lstm_bidir": (lambda: Recurrent("lstm"), (50, 40), {0: "batch", 1: "sequence"}),
            "gru": (lambda: Recurrent("gru"), (50, 40), {0: "batch", 1: "sequence"}),
            "lraspp_mobilenet_v3_large": (lambda: Segmenter(segmentation.lraspp_mobilenet_v3_large(
                weights=None, weights_backbone=None)), (3, 224, 224), {0: "batch"}),
            "deeplabv3_mobilenet_v3_large": (lambda: Segmenter(segmentation.deeplabv3_mobilenet_v3_large(
                weights=None, weights_backbone=None, aux_loss=False)), (3, 224, 224), {0: "batch"}),
            "r3d_18": (lambda: video.r3d_18(weights=None), (3, 8, 112, 112), {0: "batch"}),
        }
        for name, (make, shape, dynamic) in others.items():
            if not only or name in only:
                export(informative(make(), shape), torch.randn(1, *shape), os.path.join(args.out, "others", name + ".onnx"),
                       "input", dynamic)
        if not only or only & {"voice_activity", "loop_refiner"}:
            export_control_flow(os.path.join(args.out, "others"))


if __name__ == "__main__":
    main()
