"""The classifier network: a residual 1xk CNN whose every layer fits the Orin DLA limits.

Input float32 (batch, 2, 1, length): I and Q as two channels, height 1, so each 1-D
convolution is a 1xk 2-D convolution (the form DLA and ONNX Runtime both run fastest).
Outputs ``(logits (batch, n_classes), snr_db (batch,))``.

Layout: a 1xk stem, then stages of residual units (conv-BN-ReLU-conv-BN + skip, ReLU); every
stage but the first starts with a 2x max pool and a 1x1 projection when the width changes.
With the default six stages the backbone downsamples by 32, so every bucket (128..4096, a
power of two) leaves a power-of-two length for global pooling. Global average pooling is
``mean`` for the dynamic-shape graph (ReduceMean in ONNX); with ``static_length`` set it is
a chain of average pools of window <= 8 (DLA's limit) that is mathematically the same mean.
The heads are 1x1 convolutions (no Gemm/MatMul/Flatten) so the whole graph can sit on DLA;
the final conv of the SNR head outputs dB directly.

Optional product stem (``arch["product_stem"]``): beside the linear stem, a branch whose
outputs are elementwise products of two convolutions of the input (second order: products of
a sample with a learned mix of its neighbours up to ``kernel // 2`` samples away, which spans
lag products x[n] x*[n-k] and x[n]^2) and products of two 1x1 mixes of those (fourth order,
spanning x^4 and squared lag products). A ReLU network can only approximate such products
crudely, yet they carry what separates phase and amplitude constellations under a carrier
offset (moments and cumulants C20/C21/C40/C42 are means of exactly these). The branch is
made of DLA layers only: convolutions, elementwise Mul, Concat on channels. Its outputs join
the stem's in one of two ways (``product_stem["merge"]``): ``"concat"`` (the default, as the
second session trained it) widens stage 1's input, so stage 1 gains a 1x1 projection;
``"add"`` passes them through a 1x1 conv + BN whose scale starts at zero and adds the result
to the stem's output, so a trained network without the branch can grow one and start as
exactly the same function (see growth_problems).

Every Conv is followed by a BatchNorm in training; export folds them (see export.py).
"""

from __future__ import annotations

import copy
from typing import Any

from rfclassify._exceptions import first_line, quoted
from rfclassify._numbers import as_finite_float
from rfclassify._optional import require
from rfclassify.labels import LABELS

#: Constructor arguments of the shipped network; stored in ModelMeta.arch.
DEFAULT_ARCH: dict[str, Any] = {
    "name": "rfc-resnet",
    "in_channels": 2,
    "n_classes": len(LABELS),
    "stem_channels": 32,
    "stem_kernel": 7,
    # one entry per stage: width, kernel, dilation of each residual unit in the stage
    "stages": [
        {"channels": 32, "kernel": 5, "dilations": [1]},
        {"channels": 48, "kernel": 5, "dilations": [1]},
        {"channels": 64, "kernel": 3, "dilations": [1, 2]},
        {"channels": 96, "kernel": 3, "dilations": [1, 2]},
        {"channels": 128, "kernel": 3, "dilations": [1, 2]},
        {"channels": 128, "kernel": 3, "dilations": [1]},
    ],
    "pool": 2,               # max-pool window = stride at the start of every stage but the first
    "head_channels": 128,    # hidden width of the class head
    "snr_head_channels": 64,
    "snr_init_db": 5.0,      # bias of the SNR output at initialization (mid-range of training)
    # optional multiplicative stem beside the 1xk stem (None: off); see ProductStem
    "product_stem": None,
}

#: The product stem the A/B training run tried (see docs/model.md).
PRODUCT_STEM: dict[str, int] = {"order2": 16, "order4": 16, "kernel": 31}

#: DLA limits the network must respect (mirrored in dla_check.py, which checks the ONNX).
MAX_POOL_WINDOW = 8


def arch_with_defaults(arch: dict[str, Any] | None) -> dict[str, Any]:
    """DEFAULT_ARCH updated by `arch` (a deep copy; unknown keys are kept for the record)."""
    out = copy.deepcopy(DEFAULT_ARCH)
    if arch:
        out.update(copy.deepcopy(arch))
    return out


def downsample_factor(arch: dict[str, Any] | None = None) -> int:
    """How much shorter the backbone's output is than its input."""
    a = arch_with_defaults(arch)
    return int(a["pool"]) ** (len(a["stages"]) - 1)


def pool_chain(length: int, max_window: int = MAX_POOL_WINDOW) -> list[int]:
    """Windows (each <= max_window) whose product is `length`, largest first: a global mean as DLA pools.

    Raises ValueError when `length` has a prime factor above max_window."""
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    factors: list[int] = []
    rest = length
    for p in range(2, max_window + 1):
        while rest % p == 0:
            factors.append(p)
            rest //= p
    if rest != 1:
        raise ValueError(f"length {length} has a prime factor > {max_window}; no pool chain exists")
    # merge small factors greedily into windows <= max_window (fewer layers)
    windows: list[int] = []
    for f in sorted(factors, reverse=True):
        for i, w in enumerate(windows):
            if w * f <= max_window:
                windows[i] = w * f
                break
        else:
            windows.append(f)
    return sorted(windows, reverse=True) or [1]


#: bounds of arch_problems' form check (far past any network we would train; they keep a typo
#: from allocating terabytes or overflowing torch's sizes)
MAX_WIDTH = 65536
MAX_KERNEL = 4096


def arch_problems(arch: dict[str, Any] | None) -> list[str]:
    """What in `arch` cannot build a network at all (empty: nothing), one line each, without
    torch: each constructor argument's type and range. model.json's arch is checked so on load
    (a hand-edited or damaged one ended in a TypeError or an overflow inside torch), and so is
    train's --arch (dla_arch_problems starts with this)."""
    a = arch_with_defaults(arch)
    out: list[str] = []

    def count(value: Any, where: str, lo: int = 1, hi: int = MAX_WIDTH) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            out.append(f"{where} must be an integer in {lo}..{hi}, got {quoted(value)}")

    for key in ("in_channels", "n_classes", "stem_channels", "head_channels", "snr_head_channels"):
        count(a[key], key)
    count(a["stem_kernel"], "stem_kernel", hi=MAX_KERNEL)
    count(a["pool"], "pool", hi=MAX_KERNEL)
    snr_init_db = as_finite_float(a["snr_init_db"])
    if snr_init_db is None or abs(snr_init_db) > 1000:
        out.append(f"snr_init_db must be a number in -1000..1000 (dB), got {quoted(a['snr_init_db'])}")
    stages = a["stages"]
    if not isinstance(stages, list) or not stages:
        out.append(f"stages must be a non-empty list of stages, got {quoted(stages)}")
        stages = []
    for i, spec in enumerate(stages):
        if not isinstance(spec, dict):
            out.append(f"stages[{i}] must be a JSON object, got {quoted(spec)}")
            continue
        count(spec.get("channels"), f"stages[{i}].channels")
        count(spec.get("kernel"), f"stages[{i}].kernel", hi=MAX_KERNEL)
        dilations = spec.get("dilations")
        if not isinstance(dilations, list) or not dilations:
            out.append(f"stages[{i}].dilations must be a non-empty list, got {quoted(dilations)}")
        else:
            for j, d in enumerate(dilations):
                count(d, f"stages[{i}].dilations[{j}]", hi=MAX_KERNEL)
    ps = a.get("product_stem")
    if ps is not None:
        if not isinstance(ps, dict):
            out.append(f"product_stem must be a JSON object or null, got {quoted(ps)}")
        else:
            count(ps.get("order2"), "product_stem.order2")
            count(ps.get("order4", 0), "product_stem.order4", lo=0)
            count(ps.get("kernel"), "product_stem.kernel", hi=MAX_KERNEL)
            if ps.get("merge", "concat") not in ("concat", "add"):
                out.append(f'product_stem.merge must be "concat" or "add", got {quoted(ps.get("merge"))}')
    return out


def io_problems(arch: dict[str, Any] | None, n_labels: int = len(LABELS)) -> list[str]:
    """What in `arch` does not fit what a model reads and answers (empty: nothing), one line
    each: `in_channels` must be 2, a burst's I and Q (dsp.windows.to_model_input), and
    `n_classes` the number of labels, one logit each. arch_problems takes any count in range:
    train took these and failed inside torch (fewer classes than labels: an IndexError; other
    in_channels: conv2d's RuntimeError) or wrote a model no command serves (more classes)."""
    a = arch_with_defaults(arch)
    out = []
    if a["in_channels"] != DEFAULT_ARCH["in_channels"]:
        out.append(f"in_channels must be {DEFAULT_ARCH['in_channels']} (a burst's I and Q), "
                   f"got {quoted(a['in_channels'])}")
    if a["n_classes"] != n_labels:
        out.append(f"n_classes must be {n_labels} (one logit per label), got {quoted(a['n_classes'])}")
    return out


def dla_arch_problems(arch: dict[str, Any] | None, buckets_samples: tuple[int, ...] = ()) -> list[str]:
    """What in `arch` would keep the exported graph off the DLA (empty: nothing), without torch.

    The same limits ``dla_check`` holds the exported ONNX to, applied to the constructor
    arguments, so a training run with a bad ``--arch`` fails in a second rather than after
    the device time is spent: each convolution's kernel, dilation and padding (this network
    pads dilation * (kernel - 1) // 2 on each side), the stage pool window, and for each
    bucket a global-pool chain of windows <= 8. An arch that cannot build a network at all
    gives arch_problems' lines alone."""
    from rfclassify.model.dla_check import CONV_CHANNELS, CONV_DILATION, CONV_KERNEL, CONV_PAD_MAX, MAX_DIM

    form = arch_problems(arch)
    if form:
        return form
    a = arch_with_defaults(arch)
    convs = [("stem", int(a["stem_kernel"]), 1)]
    if a.get("product_stem"):
        convs.append(("product_stem", int(a["product_stem"]["kernel"]), 1))
    for i, spec in enumerate(a["stages"]):
        convs += [(f"stage {i} unit {j}", int(spec["kernel"]), int(d)) for j, d in enumerate(spec["dilations"])]
    out = []
    for where, k, d in convs:
        pad = d * (k - 1) // 2
        if not CONV_KERNEL[0] <= k <= CONV_KERNEL[1]:
            out.append(f"{where}: kernel {k} outside {CONV_KERNEL[0]}..{CONV_KERNEL[1]}")
        if not CONV_DILATION[0] <= d <= CONV_DILATION[1]:
            out.append(f"{where}: dilation {d} outside {CONV_DILATION[0]}..{CONV_DILATION[1]}")
        if pad > CONV_PAD_MAX or (pad >= k and pad > 0):
            out.append(f"{where}: kernel {k} with dilation {d} pads {pad}; DLA needs padding < kernel "
                       f"and <= {CONV_PAD_MAX}")
    if not 1 <= int(a["pool"]) <= MAX_POOL_WINDOW:
        out.append(f"pool {a['pool']} outside 1..{MAX_POOL_WINDOW}")
    widths = [("stem", a["stem_channels"]), ("head", a["head_channels"]), ("SNR head", a["snr_head_channels"])]
    widths += [(f"stage {i}", spec["channels"]) for i, spec in enumerate(a["stages"])]
    for where, c in widths:
        if int(c) > CONV_CHANNELS[1]:
            out.append(f"{where}: {c} channels above the DLA's {CONV_CHANNELS[1]}")
    down = downsample_factor(a)
    for b in buckets_samples:
        if b > MAX_DIM:
            out.append(f"bucket {b} is above the DLA's {MAX_DIM} samples in a dimension other than the batch")
            continue
        if b % down:
            out.append(f"bucket {b} is not a multiple of the backbone's downsampling ({down})")
            continue
        try:
            pool_chain(b // down)
        except ValueError as exc:
            out.append(f"bucket {b}: {exc}")
    return out


def growth_problems(parent_arch: dict[str, Any] | None, arch: dict[str, Any] | None) -> list[str]:
    """Why `arch` is not a deepening of `parent_arch` that starts as the same function (empty: it is).

    A deepening keeps every constructor argument and every stage's width and kernel, and only
    appends residual units to stages (the parent's dilation list is a prefix of the new one)
    and may add a product stem with ``"merge": "add"`` to a parent without one. Each new unit
    starts as the identity (its last BatchNorm scale is zero, see ResUnit) and a new product
    branch's contribution starts at zero, so the grown network computes exactly what the
    parent did and training adds capacity from there instead of from scratch."""
    old, new = arch_with_defaults(parent_arch), arch_with_defaults(arch)
    added_product = not old.get("product_stem") and bool(new.get("product_stem"))
    out = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
           if k != "stages" and old.get(k) != new.get(k) and not (k == "product_stem" and added_product)]
    if added_product and new["product_stem"].get("merge", "concat") != "add":
        out.append('product_stem: a grown product stem needs "merge": "add" (concat widens stage 1\'s input)')
    if len(old["stages"]) != len(new["stages"]):
        return out + [f"{len(old['stages'])} stages -> {len(new['stages'])}; only units can be added"]
    for i, (a, b) in enumerate(zip(old["stages"], new["stages"])):
        for k in ("channels", "kernel"):
            if int(a[k]) != int(b[k]):
                out.append(f"stage {i} {k}: {a[k]} -> {b[k]}")
        da, db = [int(d) for d in a["dilations"]], [int(d) for d in b["dilations"]]
        if db[:len(da)] != da:
            out.append(f"stage {i} dilations {da} -> {db}: the parent's units must stay first, unchanged")
    return out


def grow_network(parent: Any, parent_arch: dict[str, Any] | None, arch: dict[str, Any]) -> Any:
    """A network of `arch` holding `parent`'s weights, its added residual units at identity.

    Raises ValueError (naming every difference) when `arch` is not a deepening of
    `parent_arch` (see growth_problems)."""
    problems = growth_problems(parent_arch, arch)
    if problems:
        raise ValueError("the network is not the parent's with units added: " + "; ".join(problems))
    grown = build_network(arch)
    missing, unexpected = grown.load_state_dict(parent.state_dict(), strict=False)
    parent_a = arch_with_defaults(parent_arch)
    parent_units = [len(s["dilations"]) for s in parent_a["stages"]]
    for key in missing:  # only appended units and an added product branch may lack weights
        parts = key.split(".")
        if parts[0] in ("product", "product_merge") and not parent_a.get("product_stem"):
            continue
        if not (len(parts) > 4 and parts[0] == "stages" and parts[2] == "units"
                and int(parts[3]) >= parent_units[int(parts[1])]):
            raise ValueError(f"grown network has no parent weights for {key}")
    if unexpected:
        raise ValueError(f"parent weights unused by the grown network: {sorted(unexpected)[:3]}")
    return grown.train(parent.training)


def build_network(arch: dict[str, Any] | None = None) -> Any:
    """The classifier as a torch.nn.Module; `forward(x)` returns (logits, snr_db)."""
    torch = require("torch", "the classifier network")
    nn = torch.nn
    a = arch_with_defaults(arch)

    class ConvBN(nn.Module):
        """1xk conv + BatchNorm (+ ReLU); export folds the BN into the conv."""

        def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int = 1, relu: bool = True):
            super().__init__()
            pad = dilation * (kernel - 1) // 2
            self.conv = nn.Conv2d(c_in, c_out, (1, kernel), padding=(0, pad),
                                  dilation=(1, dilation), bias=False)
            self.bn = nn.BatchNorm2d(c_out)
            self.relu = relu

        def forward(self, x):
            x = self.bn(self.conv(x))
            return torch.relu(x) if self.relu else x

    class ResUnit(nn.Module):
        def __init__(self, c: int, kernel: int, dilation: int):
            super().__init__()
            self.a = ConvBN(c, c, kernel, dilation)
            self.b = ConvBN(c, c, kernel, dilation, relu=False)
            # zero-init the last BN scale so each unit starts as identity (stable early training)
            nn.init.zeros_(self.b.bn.weight)

        def forward(self, x):
            return torch.relu(x + self.b(self.a(x)))

    class ProductStem(nn.Module):
        """Second- and fourth-order features: Mul of two conv+BN branches (see module docstring)."""

        def __init__(self, c_in: int, order2: int, order4: int, kernel: int):
            super().__init__()
            if kernel % 2 == 0:
                raise ValueError(f"product_stem kernel must be odd (same-length output), got {kernel}")
            self.a = ConvBN(c_in, order2, 1, relu=False)
            self.b = ConvBN(c_in, order2, kernel, relu=False)
            self.c = ConvBN(order2, order4, 1, relu=False) if order4 else None
            self.d = ConvBN(order2, order4, 1, relu=False) if order4 else None
            self.channels = order2 + order4

        def forward(self, x):
            p2 = self.a(x) * self.b(x)
            if self.c is None:
                return p2
            return torch.cat([p2, self.c(p2) * self.d(p2)], dim=1)

    class Stage(nn.Module):
        def __init__(self, c_in: int, spec: dict[str, Any], pool: int):
            super().__init__()
            c = int(spec["channels"])
            self.pool = nn.MaxPool2d((1, pool), (1, pool)) if pool > 1 else nn.Identity()
            self.proj = ConvBN(c_in, c, 1) if c != c_in else nn.Identity()
            self.units = nn.Sequential(*[ResUnit(c, int(spec["kernel"]), int(d))
                                         for d in spec["dilations"]])

        def forward(self, x):
            return self.units(self.proj(self.pool(x)))

    class RfcNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.arch = a
            self.static_length: int | None = None  # set by export for the DLA graphs
            self.squeeze_outputs = True            # False: 4-D outputs (static DLA graphs)
            self.stem = ConvBN(int(a["in_channels"]), int(a["stem_channels"]), int(a["stem_kernel"]))
            stages, c = [], int(a["stem_channels"])
            self.product = self.product_merge = None
            if a.get("product_stem"):
                ps = a["product_stem"]
                merge = ps.get("merge", "concat")
                if merge not in ("concat", "add"):
                    raise ValueError(f'product_stem merge must be "concat" or "add", got {merge!r}')
                self.product = ProductStem(int(a["in_channels"]), int(ps["order2"]), int(ps.get("order4", 0)),
                                           int(ps["kernel"]))
                if merge == "add":  # into the stem's output, through a conv whose BN scale starts at 0
                    self.product_merge = ConvBN(self.product.channels, c, 1, relu=False)
                    nn.init.zeros_(self.product_merge.bn.weight)
                else:
                    c += self.product.channels
            for i, spec in enumerate(a["stages"]):
                stages.append(Stage(c, spec, 1 if i == 0 else int(a["pool"])))
                c = int(spec["channels"])
            self.stages = nn.Sequential(*stages)
            self.head = nn.Sequential(
                ConvBN(c, int(a["head_channels"]), 1),
                nn.Conv2d(int(a["head_channels"]), int(a["n_classes"]), 1))
            self.snr_head = nn.Sequential(
                ConvBN(c, int(a["snr_head_channels"]), 1),
                nn.Conv2d(int(a["snr_head_channels"]), 1, 1))
            with torch.no_grad():
                self.snr_head[-1].weight.mul_(0.1)
                self.snr_head[-1].bias.fill_(float(a["snr_init_db"]))
            self.downsample = downsample_factor(a)

        def global_pool(self, x):
            if self.static_length is None:
                return x.mean(dim=(2, 3), keepdim=True)
            for w in pool_chain(self.static_length // self.downsample):
                x = torch.nn.functional.avg_pool2d(x, (1, w), (1, w))
            return x

        def forward(self, x):
            h = self.stem(x)
            if self.product_merge is not None:
                h = h + self.product_merge(self.product(x))
            elif self.product is not None:
                h = torch.cat([h, self.product(x)], dim=1)
            f = self.global_pool(self.stages(h))
            logits, snr = self.head(f), self.snr_head(f)
            if not self.squeeze_outputs:
                return logits, snr
            return logits.flatten(1), snr.flatten(0)

    return RfcNet()


def count_parameters(model: Any) -> int:
    """Trainable parameters of a module."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def _weights_load_failure(exc: BaseException) -> str:
    """Why torch.load(weights_only=True) refused a file, in a few words. Its refusal of a pickle
    holding anything but tensors and plain containers (garbage too) advises loading it with
    weights_only=False, which runs whatever code the file holds: that advice is never passed on."""
    import pickle

    if isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc):
        return "not a state_dict of tensors as torch.save writes one"
    if isinstance(exc, EOFError):
        return "empty, or cut short"
    return first_line(exc).split(". ")[0]   # torch's zip reader goes on about what may have happened


def load_trained(model_dir: Any) -> tuple[Any, Any]:
    """(model in eval mode on the CPU, ModelMeta) from a model directory (model.json + weights);
    ModelNotFoundError for weights that are not model.json's model's (provenance.weights_problem)."""
    from pathlib import Path

    from rfclassify._exceptions import ModelNotFoundError
    from rfclassify.model.meta import ModelMeta

    torch = require("torch", "loading the trained model")
    meta = ModelMeta.load(model_dir)
    path = Path(model_dir) / meta.weights_file
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelNotFoundError(f"no weights in {model_dir}: {meta.weights_file} is missing") from None
    except OSError as exc:
        if exc.filename is None:   # torch's zip reader on a file cut short: EINVAL, no file named
            raise ModelNotFoundError(f"cannot read the weights {path}: not a weights file of this model "
                                     "(damaged, or cut short)") from None
        # a folder, or a file this user may not read
        raise ModelNotFoundError(f"cannot read the weights {path}: {exc.strerror or first_line(exc)}") from None
    except Exception as exc:  # torch raises its own types (and pickle's) for a damaged file
        raise ModelNotFoundError(f"cannot read the weights {path}: not a weights file of this model "
                                 f"({_weights_load_failure(exc)})") from None
    model = build_network(meta.arch or None)
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:  # another network's weights, or not a state dict
        raise ModelNotFoundError(f"{path} does not hold the weights of the network model.json's arch "
                                 f"describes: {first_line(exc)}") from None
    from rfclassify.model.provenance import weights_problem

    problem = weights_problem(meta, model_dir, state)   # another model's weights of the same network
    if problem:
        raise ModelNotFoundError(problem)
    return model.eval(), meta
