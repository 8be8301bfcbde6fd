"""Self-attention over feature maps (SAGAN) decides whether two distant
shapes have the same colour.

    python -m attnc.experiments.sagan_shapes [--seed N] [--quick] [--threads N] [--steps N] [--save PATH]
                                             [--no-attention | --attention-only] [--coords]

Task: attnc.datasets.SameColourShapes: 12 x 12 images, two 3 x 3 shapes
(random kind, position, one of 6 colours with a little jitter) in the left
and right 3 columns, with 6 empty columns between them, on a black
background (noise=0); label: same colour or not (balanced). (Larger images
with the same shapes, e.g. 16 x 16 or 20 x 20, dilute the shapes among many
background positions: in earlier trials neither network left chance level
within a few hundred steps there.)

Model (ShapeClassifier): the image -> conv 1x1 (16) + ReLU -> conv 1x1 (32)
+ ReLU -> SelfAttention2d(32, reduction=4) -> conv 3x3 (32) + ReLU ->
global average pool -> Linear(32, 2). The features before the attention are
per pixel (a function of the pixel's colour only); the 3x3 convolution after
it sees 3 x 3 pixels, fewer than the gap, so without the attention no pixel
sees both shapes, and the pooled features are a background term plus one
term per shape, which no linear readout turns into "same colour" for every
pair of colours (see attnc.datasets.shapes). The attention is SAGAN's, by
content only (no positional input); ``--coords`` appends two coordinate
channels to the image (CoordConv) so that it could also tell positions
apart (with the earlier recipe, 3x3 convolutions before the attention, that
variant learned less reliably; not retried with this one). The baseline is
the same network without the attention block (by default both are trained,
with the same data and steps; ``--save PATH`` then writes the network with
attention to PATH and the baseline beside it, ROOT_baseline.npz for
PATH = ROOT.npz).

Training: 3000 fresh batches of 32, Adam 5e-3 with a cosine decay to 5%,
gradients clipped to norm 1. The choices below are the experiment's, not
the module's (SelfAttention2d is SAGAN's as it stands), each found by trial:
- gamma starts at 1, not at SAGAN's 0: at 0, f, g, h and v get no gradient
  until gamma moves, and gamma's own gradient is noise while the attention
  is uniform;
- the query and key projections are tied (``tie_qk``: g starts as a copy of
  f and both get the sum of their gradients, so g = f throughout;
  shared-QK attention as in the Reformer), so s_ij = f(x_i)^T f(x_j) is a
  similarity. With separate f and g the network learned "look for a colour
  that is not mine", and on same-colour images its attention went to the
  background;
- the convolutions before the attention are 1x1. With 3x3 ones (the earlier
  recipe; 5 x 5 pixels of context) the image's zero-padded edge and the
  pixels bordering a shape got features of their own, and the attention
  learned to rest there: the map of a shape's centre pixel peaked on the
  other shape (outside its own) for only 50-58% of the queries on seeds
  0-2, and longer training made it worse;
- at the start the biases of the two 1x1 convolutions and of f and g are 0
  and f's weights are |W| * fg_scale (W Conv2d's default, fg_scale 8): the
  black background then has zero features and a zero key, every shape pixel
  a key with positive entries, so at the start every pixel of a shape looks
  at both shapes and not at the background (the initial attention is
  already uneven and depends on the content);
- f and g (one matrix, tied) decay: after each Adam step their weights are
  multiplied by 1 - lr * fg_decay (lr the scheduled rate; fg_decay 1:
  decoupled weight decay on these two only). Without it the scores grew
  into the hundreds and thousands: the map of a pixel whose colour the
  network had made the most "attractive" fell entirely on its own shape,
  the weights outside it underflowing to 0 in float32 (4-36% of the
  queries on seeds 0-2 in trials with fg_scale 4), so that its peak outside
  the own shape was undefined.
What was tried on the way, each on one to three seeds: a noisy background
(noise 0.05, with 1x1 convolutions and the default f/g initialisation:
89-92% of the peaks on the other shape but 91.6-93.7% accuracy, and a seed
stuck at chance at 6000 steps); separate f and g with 1x1 convolutions
(95.5% on seed 1, 68.6% on seed 0); 1x1 convolutions with the default f/g
initialisation (seed 1: 53%, the maps flat over the background; with the
3x3 convolution after the attention, seed 1 stayed at chance); pooling over
the shape pixels only; an unpadded frame around the image; no bias in the
first convolution; without fg_decay, label smoothing 0.1 (the scores still
saturated) or weight decay 0.1 on all the parameters (seed 0 stayed at
chance); fg_decay 3 (seed 2 stayed at chance); fg_scale 4 with fg_decay 1
(seed 0: the background's key outscored red's, and only 81% of the peaks
fell on the other shape). With a 1x1 convolution after the attention
instead of the 3x3 one (and no fg_decay) the accuracy was 92.6-99.3% on
seeds 0-2. Of the five choices only fg_decay was left out alone with the
others kept (and fg_scale 4); whether each of the others is still needed
in this combination was not measured.

Where the attention looks: the learned scores are close to rank one,
s_ij ~ a(x_i) a(x_j), with a(background) below every colour's: every pixel
looks mostly at the shape pixels of the more "attractive" of the two
colours in its image (attention_argmax_on_other_any is 50%: the peak over
all positions is on the other shape for exactly one of the two centre
pixels). So a pixel of the less attractive shape reads the other shape, a
pixel of the more attractive one reads mainly its own shape, with the other
shape still far above the background; the 3x3 convolution after the
attention compares what a pixel read with its own colour. Over seeds 0-2
(1 thread): accuracy 99.6%, 99.6%, 98.4% (without the attention block 50.8%,
50.0%, 58.6%); the peak outside the own shape lies on the other shape for
97.4%, 99.0%, 93.3% of the queries (chance ~4.7%), which get 82%, 91%, 82%
of the mass outside the own shape; 55-61 s of training (29-33 s for the
baseline). Almost all the misses are queries, mostly on different-colour
images, whose own shape takes all the attention: the weights outside it are
below 1e-30, some 0 in float32 (the scores still saturate for a few colour
pairs).

Scored on 1000 held-out images: "accuracy" (with attention) and
"accuracy_no_attention"; and where the attention of the pixel at the
centre of each shape goes (2000 queries), see attention_scores():
"attention_on_other" is the fraction of queries whose attention, over the
positions outside the query's own shape, peaks on a pixel of the other
shape (chance, for a map that ignores the shapes: "attention_on_other_chance"
~ 5%); "attention_mass_on_other" the mass on the other shape as a share of
the mass outside the own shape (vs "attention_mass_on_other_uniform", the
same under uniform attention); "attention_near_other" (the peak within one
pixel of the other shape), "attention_mass_on_own",
"attention_argmax_on_other_any" (the peak over all positions, own shape
included) and "attention_by_label" (split into same-colour and
different-colour images). Targets (issue 8): accuracy >= 95%, >= 10 points
above the baseline, and the attention of a query pixel on one shape peaking
on the other.

For notebooks: ``train_model(seed, steps=...)`` returns a trained
ShapeClassifier quickly, ``attention_maps(model, batch)`` its (n, N, N)
attention, N = 12 * 12, and ``query_attention(model, batch, which)`` the
(n, 12, 12) attention images of each shape's centre pixel.
"""

from __future__ import annotations

import time

import numpy as np

import attnc
from attnc._args import child_seeds
from attnc.datasets import SameColourShapes
from attnc.nn import Conv2d, Linear, Module, SelfAttention2d, relu

from . import _common

FULL = dict(
    steps=3000,
    batch_size=32,
    lr=5e-3,
    final_lr=0.05,
    gamma0=1.0,
    fg_scale=8.0,
    fg_decay=1.0,
    heldout=1000,
    channels=32,
    hidden=16,
    reduction=4,
    coords=False,
    tie_qk=True,
)
QUICK = dict(FULL, steps=25, batch_size=16, heldout=64)
TASK = dict(size=12, colours=6, gap=6, max_radius=1, noise=0.0)


def _prefixed(prefix, grads, skip=("input",)):
    return {f"{prefix}.{k}": v for k, v in grads.items() if k not in skip}


class ShapeClassifier(Module):
    """(B, 3, S, S) images -> (B, 2) logits: [coords] -> conv1x1 -> ReLU ->
    conv1x1 -> ReLU -> [SelfAttention2d] -> conv3x3 -> ReLU -> mean over
    positions -> Linear. ``forward(images, return_attention=True)`` also gives
    the (B, N, N) attention (None without the block). Parameters: conv1.*,
    conv2.*, attn.* (SelfAttention2d's names), conv3.*, head.*."""

    def __init__(
        self,
        channels: int = 32,
        hidden: int = 16,
        attention: bool = True,
        coords: bool = True,
        reduction: int = 4,
        *,
        dtype=np.float32,
        seed=None,
    ):
        super().__init__(dtype)
        s = child_seeds(seed, 5)
        self.attention, self.coords = bool(attention), bool(coords)
        self.conv1 = Conv2d(3 + 2 * self.coords, hidden, 1, dtype=dtype, seed=s[0])  # per pixel
        self.conv2 = Conv2d(hidden, channels, 1, dtype=dtype, seed=s[1])
        if self.attention:
            self.attn = SelfAttention2d(channels, reduction, dtype=dtype, seed=s[2])
        self.conv3 = Conv2d(channels, channels, 3, padding=1, dtype=dtype, seed=s[3])
        self.head = Linear(channels, 2, dtype=dtype, seed=s[4])

    def _inputs(self, images):
        x = np.asarray(images, self.dtype)
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"images must be (batch, 3, H, W), got shape {x.shape}")
        if self.coords:
            B, _, H, W = x.shape
            rows = np.broadcast_to(np.linspace(-1, 1, H, dtype=self.dtype)[:, None], (H, W))
            cols = np.broadcast_to(np.linspace(-1, 1, W, dtype=self.dtype)[None, :], (H, W))
            grid = np.broadcast_to(np.stack([rows, cols]), (B, 2, H, W))
            x = np.concatenate([x, grid], axis=1)
        return x

    def forward(self, images, return_attention: bool = False):
        out, _ = self._vjp_forward(images, return_attention)
        return out

    def _vjp_forward(self, images, return_attention: bool = False):
        x = self._inputs(images)
        h1, pb1 = attnc.vjp(self.conv1, x)
        a1, pr1 = attnc.vjp(relu, h1)
        h2, pb2 = attnc.vjp(self.conv2, a1)
        a2, pr2 = attnc.vjp(relu, h2)
        attn_map, pba = None, None
        if self.attention:
            out, pba = attnc.vjp(self.attn, a2, return_attention=return_attention)
            z, attn_map = out if return_attention else (out, None)
        else:
            z = a2
        h3, pb3 = attnc.vjp(self.conv3, z)
        a3, pr3 = attnc.vjp(relu, h3)
        pooled = a3.mean(axis=(2, 3))
        logits, pbh = attnc.vjp(self.head, pooled)
        saved = (pb1, pr1, pb2, pr2, pba, pb3, pr3, pbh, a3.shape, return_attention)
        return ((logits, attn_map) if return_attention else logits), saved

    @staticmethod
    def _vjp_backward(saved, cotangents):
        pb1, pr1, pb2, pr2, pba, pb3, pr3, pbh, shape, with_map = saved
        dlogits = cotangents[0]
        grads = {}
        gh = pbh(dlogits)
        grads.update(_prefixed("head", gh))
        da3 = np.broadcast_to(gh["input"][:, :, None, None] / (shape[2] * shape[3]), shape)
        g3 = pb3(pr3(np.ascontiguousarray(da3))["input"])
        grads.update(_prefixed("conv3", g3))
        dz = g3["input"]
        if pba is not None:
            ga = pba(dz, cotangents[1]) if with_map else pba(dz)
            grads.update(_prefixed("attn", ga))
            dz = ga["input"]
        g2 = pb2(pr2(dz)["input"])
        grads.update(_prefixed("conv2", g2))
        g1 = pb1(pr1(g2["input"])["input"])
        grads.update(_prefixed("conv1", g1))
        return grads


def _loss_and_grads(model, tie_qk=False):
    def step(batch):
        logits, pullback = attnc.vjp(model, batch.images)
        loss, pl = attnc.vjp(attnc.nn.cross_entropy, logits, batch.labels)
        grads = pullback(pl(np.ones((), logits.dtype))["input"])
        if tie_qk:  # one projection for queries and keys: f and g get the sum of their gradients
            for name in ("weight", "bias"):
                total = grads[f"attn.f.{name}"] + grads[f"attn.g.{name}"]
                grads[f"attn.f.{name}"], grads[f"attn.g.{name}"] = total, total.copy()
        return float(loss), grads

    return step


def train_model(
    seed: int = 0,
    *,
    attention: bool = True,
    steps: int | None = None,
    quick: bool = False,
    disable_progress: bool = True,
    desc: str = "sagan_shapes",
    after_step=None,
    run=None,
    **overrides,
):
    """Train a ShapeClassifier (float32) on fresh batches of the task; returns
    (model, result) with result as attnc.experiments._common.train's (losses,
    train_seconds, ...). About a minute with attention at the default steps
    on one core; ``overrides`` replace FULL's (or QUICK's) settings, e.g.
    ``fg_decay=0`` or ``tie_qk=False``. run: the experiment's Run (its
    folder, checkpoints and resumption), when main() trains."""
    cfg = _common.config(FULL, QUICK, _common.plain_args(seed, quick, steps))
    unknown = set(overrides) - set(cfg)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    cfg.update(overrides)
    task = SameColourShapes(**TASK)
    model = ShapeClassifier(
        cfg["channels"], cfg["hidden"], attention=attention, coords=cfg["coords"], reduction=cfg["reduction"], seed=seed
    )
    for conv in (model.conv1, model.conv2):  # the black background starts with zero features
        conv.bias = np.zeros_like(conv.bias)
    if attention:  # see the docstring
        model.attn.gamma = np.array([cfg["gamma0"]])
        for conv in (model.attn.f, model.attn.g):  # non-negative, larger keys and queries; zero bias
            conv.weight = np.abs(conv.weight) * np.asarray(cfg["fg_scale"], conv.weight.dtype)
            conv.bias = np.zeros_like(conv.bias)
        if cfg["tie_qk"]:
            model.attn.g.weight, model.attn.g.bias = model.attn.f.weight.copy(), model.attn.f.bias.copy()
    opt, sched = _common.adam_warmup_cosine(model, cfg["lr"], 1, cfg["steps"], cfg["final_lr"])
    if attention and cfg["fg_decay"]:
        after_step = _decay_fg(model, opt, cfg["fg_decay"], after_step)
    data = np.random.default_rng([seed, 1])  # the same batches with and without attention
    result = _common.train(
        model,
        opt,
        _loss_and_grads(model, attention and cfg["tie_qk"]),
        lambda step: task.batch(cfg["batch_size"], data),
        cfg["steps"],
        scheduler=sched,
        desc=desc,
        disable_progress=disable_progress,
        after_step=after_step,
        run=run,
        rngs={"data": data},
    )
    return model, result


def _decay_fg(model, opt, rate, then=None):
    """after_step: decoupled weight decay of the key and query projections
    only, f.weight and g.weight *= 1 - lr rate (lr the optimiser's current
    rate), then ``then(step)`` if given."""

    def after_step(step):
        for conv in (model.attn.f, model.attn.g):
            conv.weight *= np.asarray(1 - opt.lr * rate, conv.weight.dtype)
        if then is not None:
            then(step)

    return after_step


def heldout(seed: int = 0, n: int = 1000):
    """The held-out images (seeded apart from every training batch)."""
    return SameColourShapes(**TASK).batch(n, seed=np.random.default_rng([seed, 2]))


def _batched(model, images, return_attention, chunk=250):
    outs = [model(images[i : i + chunk], return_attention=return_attention) for i in range(0, len(images), chunk)]
    if not return_attention:
        return np.concatenate(outs), None
    return np.concatenate([o[0] for o in outs]), np.concatenate([o[1] for o in outs])


def accuracy(model, batch) -> float:
    logits, _ = _batched(model, batch.images, False)
    return float(np.mean(logits.argmax(-1) == batch.labels))


def attention_maps(model, batch):
    """(n, N, N) attention of the model's SelfAttention2d on batch.images
    (row j: where position j = r W + c looks)."""
    return _batched(model, batch.images, True)[1]


def query_attention(model, batch, which: int = 0, maps=None):
    """(n, S, S): the attention of the pixel at the centre of shape `which`
    (0 left, 1 right) over the image, for drawing."""
    maps = attention_maps(model, batch) if maps is None else maps
    S = batch.images.shape[-1]
    q = batch.centres[:, which, 0] * S + batch.centres[:, which, 1]
    return maps[np.arange(len(q)), q].reshape(-1, S, S)


def _dilate(masks):
    """masks (n, S, S) grown by one pixel in the 8 directions."""
    padded = np.pad(masks, ((0, 0), (1, 1), (1, 1)))
    S = masks.shape[-1]
    out = np.zeros_like(masks)
    for dr in range(3):
        for dc in range(3):
            out |= padded[:, dr : dr + S, dc : dc + S]
    return out


def attention_scores(model, batch, maps=None) -> dict:
    """Where the attention of each shape's centre pixel goes (both shapes of
    every image are queries: 2 n queries).

    The issue's check, "attention_on_other": for the query at the centre of
    shape s, take its attention row over the positions *outside shape s* (its
    own pixels are left out: a pixel naturally attends to its own object, and
    that says nothing about the other one) and ask whether the largest weight
    among them lies on a pixel of the other shape and is a real peak: at
    least twice the mean weight over those positions (so a flat map does not
    pass by the accident of its argmax). The fraction of queries for which it
    does; it can fail (the peak may fall on the background, or there may be
    none), and a map that ignored the shapes would score at most about
    "attention_on_other_chance" = mean |other| / (N - |own|) (~5% here).
    "attention_mass_on_other": the attention mass on the other shape's pixels
    as a share of the mass outside the own shape, next to
    "attention_mass_on_other_uniform", the same share under uniform attention.
    Also: "attention_near_other" (the argmax outside the own shape within one
    pixel of the other shape: the features before the attention see 5 x 5
    pixels, so the pixels bordering a shape carry its colour too),
    "attention_mass_on_own" (the raw mass on the query's own shape),
    "attention_argmax_on_other_any" (the argmax over all positions, own shape
    included, on the other shape: the measure reported before) and
    "attention_by_label" (the check and the mass share split into same-colour
    and different-colour images).
    """
    maps = attention_maps(model, batch) if maps is None else maps
    n = len(maps)
    keys = ("on_other", "near_other", "any_other", "share_other", "share_uniform", "mass_own")
    scores = {k: [] for k in keys}
    rows = np.arange(n)
    for which in (0, 1):
        att = query_attention(model, batch, which, maps).reshape(n, -1).astype(np.float64)
        own = batch.masks[:, which].reshape(n, -1)
        other = batch.masks[:, 1 - which].reshape(n, -1)
        near = _dilate(batch.masks[:, 1 - which]).reshape(n, -1) & ~own
        top = np.where(own, -np.inf, att).argmax(-1)  # argmax outside the own shape
        outside = (att * ~own).sum(-1)
        peaked = att[rows, top] >= 2 * outside / (~own).sum(-1)  # a peak, not a flat map's accident
        scores["on_other"].append(other[rows, top] & peaked)
        scores["near_other"].append(near[rows, top] & peaked)
        scores["any_other"].append(other[rows, att.argmax(-1)])
        scores["share_other"].append((att * other).sum(-1) / np.maximum(outside, 1e-30))
        scores["share_uniform"].append(other.sum(-1) / (~own).sum(-1))
        scores["mass_own"].append((att * own).sum(-1))
    cat = {k: np.concatenate(v) for k, v in scores.items()}
    same = np.concatenate([batch.labels == 1] * 2)

    def part(sel):
        return {
            "attention_on_other": float(np.mean(cat["on_other"][sel])),
            "attention_mass_on_other": float(np.mean(cat["share_other"][sel])),
        }

    return {
        "attention_on_other": float(np.mean(cat["on_other"])),
        "attention_on_other_chance": float(np.mean(cat["share_uniform"])),
        "attention_near_other": float(np.mean(cat["near_other"])),
        "attention_mass_on_other": float(np.mean(cat["share_other"])),
        "attention_mass_on_other_uniform": float(np.mean(cat["share_uniform"])),
        "attention_mass_on_own": float(np.mean(cat["mass_own"])),
        "attention_argmax_on_other_any": float(np.mean(cat["any_other"])),
        "attention_by_label": {"different_colours": part(~same), "same_colour": part(same)},
    }


def add_flags(parser):
    """This experiment's own flags."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--no-attention", action="store_true", help="train only the network without attention")
    group.add_argument("--attention-only", action="store_true", help="train only the network with attention")
    parser.add_argument("--coords", action="store_true", help="append two coordinate channels (CoordConv)")


def main(argv=None):
    args = _common.parse_args(__name__, argv)
    cfg = _common.config(FULL, QUICK, args)
    held = heldout(args.seed, cfg["heldout"])
    metrics, models, results = {}, {}, {}
    start_eval = 0.0
    for attention in (True, False):
        if (attention and args.no_attention) or (not attention and args.attention_only):
            continue
        model, result = train_model(
            args.seed,
            attention=attention,
            steps=cfg["steps"],
            quick=args.quick,
            disable_progress=args.no_progress,
            coords=args.coords,
            run=args.run,
            desc="sagan_shapes" + ("" if attention else " (no attention)"),
        )
        t0 = time.perf_counter()
        models[attention], results[attention] = model, result
        if attention:
            metrics["accuracy"] = accuracy(model, held)
            metrics.update(attention_scores(model, held))
            metrics["gamma"] = float(model.attn.gamma[0])
        else:
            metrics["accuracy_no_attention"] = accuracy(model, held)
            metrics["train_seconds_no_attention"] = result["train_seconds"]
            metrics["final_loss_no_attention"] = result["final_loss"]
        start_eval += time.perf_counter() - t0
    if "accuracy" in metrics and "accuracy_no_attention" in metrics:
        metrics["accuracy_gain"] = metrics["accuracy"] - metrics["accuracy_no_attention"]
    if "accuracy" not in metrics:  # --no-attention: the baseline's score is the run's accuracy
        metrics["accuracy"] = metrics["accuracy_no_attention"]
    main_attention = True in models
    model, result = models[main_attention], results[main_attention]
    if main_attention and False in models:  # --save PATH: the baseline beside it, as ROOT_baseline.npz
        _common.save_beside(args.save, "baseline", models[False])
    return _common.report(
        "sagan_shapes",
        args,
        model,
        result,
        cfg["batch_size"],
        start_eval,
        attention=main_attention,
        coords=args.coords,
        heldout_size=cfg["heldout"],
        **metrics,
    )


if __name__ == "__main__":
    # the importable module's main, so that --save records attnc.experiments.sagan_shapes.ShapeClassifier
    import attnc.experiments.sagan_shapes as _module

    _module.main()
