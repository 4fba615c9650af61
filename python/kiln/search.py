"""kiln's kernel architecture search loop on real data (``kiln search``, or
``python3 -m kiln.search``).

For a network whose 3x3 convolutions are ``kiln.Placeholder``s (by default the small ResNet of
kiln.fmnist on Fashion-MNIST) and a time limit, it repeats, round after round:

1. **sample**: the C sampler (libkiln's kiln_kas_sampler_*, what ``kiln sample --json --out``
   does) draws ``--per-round`` kernels legal for every
   placeholder shape, their FLOPs and parameters inside ``--flops`` / ``--params`` (the budget
   solver of kas/ sizes them exactly);
2. **screen**: the NASWOT score (Mellor et al., 2021: the log-determinant of the Hamming-
   similarity kernel of the ReLU activation patterns of one minibatch, at initialisation,
   forward pass only) of the network with the kernel swapped in; a kernel whose network fails
   to run or gives non-finite outputs is dropped with the error, and only the best
   ``--screen-keep`` fraction of each round goes on;
3. **latency**: the kernel's graph for each placeholder shape is tuned by kiln (``kiln tune
   --trials N --db OUT/search.db``), compiled with the best schedules (``kiln compile --db``)
   and timed (``kiln run --bench``); the latency is the sum over the network's placeholder layers,
   compared with the same sum for the 3x3 convolution tuned and timed the same way. Kernels
   slower than ``--max-latency`` times the convolution stop here;
4. **train**: the network with the kernel trains on a Fashion-MNIST subset for ``--epochs``
   epochs (AdamW, cosine schedule, the same seed and budget as the convolution baseline) and is
   evaluated on a test subset after every epoch; a kernel more than ``--cutoff`` points behind
   the best accuracy any trained network had after the same epoch is cut there;
5. the **Pareto front** of latency against accuracy is rewritten after every candidate.

Every finished candidate (whatever its outcome) is appended to OUT/results.jsonl with its
sampler seed and index, code paths (.py and .kg), scores and failure reason; a run started again
with the same OUT skips them (an interrupted candidate is redone). OUT also receives
results.json, results.csv and pareto.svg. See kas/README.md ("The search loop").
"""

import argparse
import csv
import json
import math
import os
import re
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F

from . import fmnist
from .errors import Error
from .kas import (load_module_file, record_shapes, replace, run_kiln,
                  sample_kernels)

BASELINE = "conv3x3"
# options that change results: a run resumed with other values is refused
RESULT_KEYS = ("model", "width", "image_size", "train", "test", "epochs", "batch_size", "lr",
               "seed", "flops", "params", "max_ops", "min_rf", "per_round", "screen_keep",
               "screen_batch", "trials", "threads", "max_latency", "cutoff", "data")


class Search:
    def __init__(self, opts, log=None):
        self.o = opts
        self.t0 = time.time()
        self.log = log or (lambda s: print(s, file=sys.stderr, flush=True))
        self.out = opts.out
        os.makedirs(self.out, exist_ok=True)
        self.jsonl = os.path.join(self.out, "results.jsonl")
        self.db = os.path.join(self.out, "search.db")
        self.records = {}
        self.order = []

    # ---- bookkeeping ----
    def elapsed(self):
        return time.time() - self.t0

    def time_left(self):
        return self.o.time_limit - self.elapsed()

    def say(self, cid, msg):
        if not self.o.quiet:
            self.log("[%5.0fs/%ds] %-9s %s" % (self.elapsed(), self.o.time_limit, cid, msg))

    def check_config(self):
        path = os.path.join(self.out, "config.json")
        mine = {k: getattr(self.o, k) for k in RESULT_KEYS}
        if os.path.exists(path):
            with open(path) as f:
                old = json.load(f)
            diff = [k for k in RESULT_KEYS if k in old and old[k] != mine[k]]
            if diff:
                raise Error("%s holds a search with other options (%s: was %s, now %s); resume "
                            "with the same options or use another --out"
                            % (self.out, diff[0], old[diff[0]], mine[diff[0]]))
        with open(path, "w") as f:
            json.dump(mine, f, indent=1)

    def load_records(self):
        if not os.path.exists(self.jsonl):
            return
        with open(self.jsonl) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    cid = r["id"]
                except (ValueError, KeyError):
                    # a line cut short by a killed run: that candidate is redone
                    self.log("%s:%d: ignoring an unreadable record" % (self.jsonl, n))
                    continue
                if cid not in self.records:
                    self.order.append(cid)
                self.records[cid] = r

    def store(self, rec):
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(rec) + "\n")
        if rec["id"] not in self.records:
            self.order.append(rec["id"])
        self.records[rec["id"]] = rec
        self.write_results()

    # ---- the network and data ----
    def build_model(self):
        torch.manual_seed(self.o.seed)
        if self.o.model == "resnet":
            return fmnist.resnet_fmnist(self.o.width)
        path, _, fn = self.o.model.rpartition(":")
        if not path or not fn:
            raise Error("--model %s: expected 'resnet' or FILE.py:FUNCTION" % self.o.model)
        if not os.path.exists(path):
            raise Error("--model %s: %s does not exist" % (self.o.model, path))
        mod = load_module_file(path)
        if not hasattr(mod, fn):
            raise Error("--model %s: %s defines no %s" % (self.o.model, path, fn))
        net = getattr(mod, fn)()
        if not isinstance(net, nn.Module):
            raise Error("--model %s: %s() returned %s, not an nn.Module"
                        % (self.o.model, fn, type(net).__name__))
        return net

    def fresh_model(self, factory):
        """The network with every placeholder replaced by factory(C, K), initialised from the
        search's seed (the same for every candidate)."""
        net = self.build_model()
        record_shapes(net, self.example)
        torch.manual_seed(self.o.seed + 1)
        return replace(net, factory)

    def setup(self):
        torch.set_num_threads(self.o.threads)
        self.xtr, self.ytr = fmnist.load("train", self.o.train, self.o.image_size, self.o.data,
                                         seed=self.o.seed)
        self.xte, self.yte = fmnist.load("test", self.o.test, self.o.image_size, self.o.data,
                                         seed=self.o.seed)
        self.example = self.xtr[:1]
        net = self.build_model()
        found = record_shapes(net, self.example)
        strides = {ph.stride for _, ph, _ in found}
        if strides != {1}:
            raise Error("the search replaces stride-1 placeholders only; the model has "
                        "strides %s" % sorted(strides))
        self.shapes, self.counts = [], []
        for _, _, s in found:
            if s in self.shapes:
                self.counts[self.shapes.index(s)] += 1
            else:
                self.shapes.append(s)
                self.counts.append(1)
        if len(self.shapes) > 16:
            raise Error("the model has %d distinct placeholder shapes; the sampler takes 16"
                        % len(self.shapes))
        self.log("kiln search: %d placeholders, shapes %s; %d training and %d test images at "
                 "%dx%d; results in %s" % (
                     len(found), ", ".join("%dx(C=%d,K=%d,%dx%d)" % ((n,) + s)
                                           for s, n in zip(self.shapes, self.counts)),
                     len(self.ytr), len(self.yte), self.o.image_size, self.o.image_size,
                     self.out))

    # ---- stages ----
    def naswot(self, net):
        """NASWOT score of the network at initialisation on a fixed minibatch."""
        codes = []

        def hook(_m, _i, out):
            codes.append((out.detach() > 0).flatten(1).to(torch.float64))

        hooks = [m.register_forward_hook(hook) for m in net.modules() if isinstance(m, nn.ReLU)]
        try:
            net.train()
            with torch.no_grad():
                y = net(self.xtr[:self.o.screen_batch])
        finally:
            for h in hooks:
                h.remove()
        if not torch.isfinite(y).all():
            raise Error("non-finite network output at initialisation")
        if not codes:
            raise Error("the network has no nn.ReLU module for the NASWOT score")
        n = codes[0].shape[0]
        k = torch.zeros(n, n, dtype=torch.float64)
        for c in codes:
            k += c @ c.t() + (1 - c) @ (1 - c).t()
        sign, logdet = torch.linalg.slogdet(k)
        return float(logdet) if sign > 0 else float("-inf")

    def latency(self, kg_paths, cid):
        """Tuned latency (seconds) of the graphs, one per placeholder shape, summed over the
        network's placeholder layers; and the per-shape times."""
        per = []
        for path in kg_paths:
            run_kiln(["tune", path, "--trials", self.o.trials, "--db", self.db, "--threads",
                      self.o.threads, "--seed", self.o.seed, "--quiet"],
                     timeout=max(60, 30 * self.o.trials))
            so = path[:-3] + ".so"
            run_kiln(["compile", path, "--db", self.db, "-o", so], timeout=300)
            out = run_kiln(["run", so, "--bench", "--threads", self.o.threads, "--repeat",
                            self.o.repeat, "--min-time", self.o.min_time], timeout=300)
            m = re.search(r"bench: ([0-9.eE+-]+) ms per call", out)
            if not m:
                raise Error("kiln run --bench printed no time for %s" % so)
            per.append(float(m.group(1)) * 1e-3)
        total = sum(t * n for t, n in zip(per, self.counts))
        return total, per

    def train(self, net, cid):
        """Trains for the epochs, evaluating after each; returns (accuracies, status, reason)."""
        o = self.o
        torch.manual_seed(o.seed + 2)
        opt = torch.optim.AdamW(net.parameters(), lr=o.lr, weight_decay=5e-4)
        steps_per_epoch = math.ceil(len(self.ytr) / o.batch_size)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=o.lr, epochs=o.epochs,
                                                    steps_per_epoch=steps_per_epoch,
                                                    pct_start=0.15)
        gen = torch.Generator().manual_seed(o.seed + 3)
        accs = []
        for epoch in range(1, o.epochs + 1):
            if self.time_left() <= 0:
                return accs, None, "time limit"
            net.train()
            perm = torch.randperm(len(self.ytr), generator=gen)
            t = time.time()
            for s in range(steps_per_epoch):
                idx = perm[s * o.batch_size:(s + 1) * o.batch_size]
                loss = F.cross_entropy(net(self.xtr[idx]), self.ytr[idx])
                if not torch.isfinite(loss):
                    return accs, "failed", "non-finite loss at epoch %d step %d" % (epoch, s + 1)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), 5.0)
                opt.step()
                sched.step()
            acc = self.evaluate(net)
            accs.append(acc)
            self.say(cid, "epoch %d/%d: test accuracy %.2f%% (%.0f s)"
                     % (epoch, o.epochs, acc, time.time() - t))
            if epoch < o.epochs:
                best = self.best_at_epoch(epoch)
                if best is not None and acc < best - o.cutoff:
                    return accs, "cut", ("%.2f%% after epoch %d, more than %g points behind the "
                                         "best %.2f%%" % (acc, epoch, o.cutoff, best))
        return accs, "trained", None

    def evaluate(self, net):
        net.eval()
        right = 0
        with torch.no_grad():
            for s in range(0, len(self.yte), 256):
                pred = net(self.xte[s:s + 256]).argmax(1)
                right += int((pred == self.yte[s:s + 256]).sum())
        return 100.0 * right / len(self.yte)

    def best_at_epoch(self, epoch):
        vals = [r["accuracy_epochs"][epoch - 1] for r in self.records.values()
                if len(r.get("accuracy_epochs") or []) >= epoch]
        return max(vals) if vals else None

    # ---- the baseline and candidates ----
    def run_baseline(self):
        if BASELINE in self.records:
            r = self.records[BASELINE]
            if r["status"] != "trained":
                raise Error("the %s baseline in %s failed: %s" % (BASELINE, self.jsonl,
                                                                   r.get("reason")))
            return
        d = os.path.join(self.out, "baseline")
        os.makedirs(d, exist_ok=True)
        kgs = []
        for j, (c, k, h, w) in enumerate(self.shapes, 1):
            p = os.path.join(d, "conv3x3_p%d.kg" % j)
            with open(p, "w") as f:
                f.write("# the 3x3 convolution the search replaces (placeholder %d)\n"
                        "input x: f32[1, %d, %d, %d]\nweight w: f32[%d, %d, 3, 3]\n"
                        "y = conv2d(x, w, stride=1, padding=1)\noutput y\n" % (j, c, h, w, k, c))
            kgs.append(p)
        rec = {"id": BASELINE, "design": "conv(3x3) dense (nn.Conv2d, no bias)", "flops": 1.0,
               "params": 1.0, "kg": kgs, "py": None, "seed": self.o.seed, "index": 0,
               "hash": None}
        self.say(BASELINE, "tuning the 3x3 convolutions (%d trials per shape)" % self.o.trials)
        rec["latency_s"], rec["latency_per_shape_s"] = self.latency(kgs, BASELINE)
        rec["speedup"] = 1.0
        self.say(BASELINE, "latency %.4g ms over the placeholder layers"
                 % (rec["latency_s"] * 1e3))
        net = self.fresh_model(lambda c, k: nn.Conv2d(c, k, 3, padding=1, bias=False))
        rec["naswot"] = self.naswot(net)
        t = time.time()
        accs, status, reason = self.train(net, BASELINE)
        if status is None:
            raise Error("the time limit ran out while training the baseline; give more time")
        rec.update(accuracy_epochs=accs, accuracy=accs[-1] if accs else None,
                   train_s=time.time() - t, status=status, reason=reason)
        self.store(rec)
        if status != "trained":
            raise Error("the %s baseline failed: %s" % (BASELINE, reason))

    def done(self):
        return sum(1 for c in self.records if c != BASELINE)

    def run_round(self, rnd):
        o = self.o
        seed = o.seed * 1000 + rnd
        d = os.path.join(self.out, "r%03d" % rnd)
        ids = ["r%03dk%04d" % (rnd, i + 1) for i in range(o.per_round)]
        if all(i in self.records for i in ids):
            return True
        kernels = sample_kernels(self.shapes, n=o.per_round, seed=seed, flops=o.flops,
                                 params=o.params, max_ops=o.max_ops, min_rf=o.min_rf, out=d)
        cands = []
        for cid, kern in zip(ids, kernels):
            rec = self.records.get(cid)
            if rec is None:
                rec = {"id": cid, "seed": seed, "index": kern.index, "hash": kern.hash,
                       "design": kern.design, "values": kern.values, "flops": kern.flops,
                       "params": kern.params, "py": kern.py, "kg": kern.kg_paths}
                self.say(cid, "sampled: flops %.3f params %.3f  %s"
                         % (kern.flops, kern.params, kern.design))
                try:
                    net = self.fresh_model(kern.module)
                    rec["naswot"] = self.naswot(net)
                    self.say(cid, "screen: NASWOT %.2f" % rec["naswot"])
                except Exception as e:  # a sampled kernel's module may fail in any way
                    rec.update(status="failed", stage="screen", reason=_reason(e))
                    self.say(cid, "failed at screening: %s" % rec["reason"])
                    self.store(rec)
                    continue
            cands.append((cid, kern, rec))
        scored = [c for c in cands if c[2].get("naswot") is not None]
        keep = max(1, math.ceil(o.screen_keep * len(scored))) if scored else 0
        ranked = sorted(scored, key=lambda c: -c[2]["naswot"])
        cut = ranked[keep - 1][2]["naswot"] if keep else None
        for pos, (cid, kern, rec) in enumerate(ranked):
            if cid in self.records:
                continue
            if self.time_left() <= 0 or self.done() >= o.candidates:
                return False
            if pos >= keep:
                rec.update(status="screened", stage="screen",
                           reason="NASWOT %.2f below the round's cut %.2f (top %g kept)"
                           % (rec["naswot"], cut, o.screen_keep))
                self.say(cid, rec["reason"])
                self.store(rec)
                continue
            self.evaluate_candidate(cid, kern, rec)
        return self.time_left() > 0 and self.done() < o.candidates

    def evaluate_candidate(self, cid, kern, rec):
        o = self.o
        base = self.records[BASELINE]
        try:
            self.say(cid, "tuning (%d trials per shape)" % o.trials)
            rec["latency_s"], rec["latency_per_shape_s"] = self.latency(kern.kg_paths, cid)
        except Error as e:
            rec.update(status="failed", stage="latency", reason=str(e))
            self.say(cid, "failed at tuning: %s" % e)
            self.store(rec)
            return
        rec["speedup"] = base["latency_s"] / rec["latency_s"]
        self.say(cid, "latency %.4g ms: %.2fx the tuned 3x3 convolution"
                 % (rec["latency_s"] * 1e3, rec["speedup"]))
        if rec["latency_s"] > o.max_latency * base["latency_s"]:
            rec.update(status="slower", stage="latency",
                       reason="latency %.2fx the convolution's, above --max-latency %g"
                       % (1 / rec["speedup"], o.max_latency))
            self.store(rec)
            return
        if self.time_left() <= 0:
            return
        t = time.time()
        try:
            net = self.fresh_model(kern.module)
            accs, status, reason = self.train(net, cid)
        except Exception as e:
            accs, status, reason = None, "failed", _reason(e)
        if status is None:   # out of time mid-training: not recorded, redone on resume
            self.say(cid, "time limit reached during training (redone when resumed)")
            return
        rec.update(stage="train", status=status, reason=reason, accuracy_epochs=accs,
                   accuracy=accs[-1] if accs else None, train_s=time.time() - t)
        self.say(cid, "%s%s" % (status, ": " + reason if reason else
                                ", accuracy %.2f%% (baseline %.2f%%)" % (rec["accuracy"],
                                                                         base["accuracy"])))
        self.store(rec)

    def run(self):
        self.check_config()
        self.load_records()
        if self.records:
            self.log("kiln search: resuming, %d candidates already done%s" % (
                self.done(), " (and the baseline)" if BASELINE in self.records else ""))
        self.setup()
        self.run_baseline()
        rnd = 0
        while self.time_left() > 0 and self.done() < self.o.candidates \
                and rnd < self.o.max_rounds:
            if not self.run_round(rnd):
                break
            rnd += 1
        self.write_results()
        self.summary()
        return 0

    # ---- results ----
    def pareto(self):
        pts = [r for r in self.records.values() if r.get("status") == "trained"]
        pts.sort(key=lambda r: (r["latency_s"], -r["accuracy"]))
        front, best = [], -1.0
        for r in pts:
            if r["accuracy"] > best:
                front.append(r)
                best = r["accuracy"]
        return pts, front

    def write_results(self):
        recs = [self.records[c] for c in self.order]
        pts, front = self.pareto()
        base = self.records.get(BASELINE)
        doc = {"config": {k: getattr(self.o, k) for k in RESULT_KEYS},
               "shapes": [list(s) for s in getattr(self, "shapes", [])],
               "layers_per_shape": getattr(self, "counts", []),
               "baseline": base, "candidates": recs, "pareto": [r["id"] for r in front]}
        _atomic_write(os.path.join(self.out, "results.json"), json.dumps(doc, indent=1))
        cols = ["id", "status", "stage", "seed", "index", "hash", "flops", "params", "naswot",
                "latency_ms", "speedup", "accuracy", "accuracy_epochs", "train_s", "pareto",
                "py", "kg", "design", "reason"]
        tmp = os.path.join(self.out, "results.csv.tmp")
        ids = {r["id"] for r in front}
        with open(tmp, "w", newline="") as f:
            wr = csv.writer(f)
            wr.writerow(cols)
            for r in recs:
                row = dict(r)
                row["latency_ms"] = None if r.get("latency_s") is None else r["latency_s"] * 1e3
                row["accuracy_epochs"] = " ".join("%.2f" % a for a in r.get("accuracy_epochs")
                                                  or [])
                row["kg"] = " ".join(r.get("kg") or [])
                row["pareto"] = int(r["id"] in ids)
                wr.writerow(["" if row.get(c) is None else row[c] for c in cols])
        os.replace(tmp, os.path.join(self.out, "results.csv"))
        _atomic_write(os.path.join(self.out, "pareto.svg"), pareto_svg(pts, front, base))

    def summary(self):
        pts, front = self.pareto()
        base = self.records.get(BASELINE)
        counts = {}
        for c, r in self.records.items():
            if c != BASELINE:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
        self.log("kiln search: %d candidates (%s) in %.0f s; Pareto front (latency over the "
                 "placeholder layers, test accuracy):" % (
                     self.done(), ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items()))
                     or "none", self.elapsed()))
        for r in front:
            self.log("  %-9s %8.4g ms  %5.2fx  %6.2f%%  %s" % (
                r["id"], r["latency_s"] * 1e3, base["latency_s"] / r["latency_s"],
                r["accuracy"], r["design"]))
        print(json.dumps({"baseline": {"latency_s": base["latency_s"],
                                       "accuracy": base["accuracy"]} if base else None,
                          "pareto": [{"id": r["id"], "latency_s": r["latency_s"],
                                      "speedup": base["latency_s"] / r["latency_s"],
                                      "accuracy": r["accuracy"], "design": r["design"]}
                                     for r in front]}))


def _reason(e):
    s = str(e).strip().splitlines()
    return "%s: %s" % (type(e).__name__, s[-1] if s else "")


def _atomic_write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _esc(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def pareto_svg(pts, front, base):
    """A scatter plot of accuracy against latency (ms) of the trained networks as SVG text: all
    points grey, the Pareto front red and joined, the 3x3 convolution blue."""
    W, H, L, R, T, B = 640, 420, 70, 20, 30, 50
    if not pts:
        return ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d"><text x="20" '
                'y="40">no trained network yet</text></svg>\n' % (W, H))
    xs = [r["latency_s"] * 1e3 for r in pts]
    ys = [r["accuracy"] for r in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    dx = (x1 - x0) or max(x1, 1e-6) * 0.2
    dy = (y1 - y0) or 1.0
    x0, x1, y0, y1 = max(0.0, x0 - 0.08 * dx), x1 + 0.08 * dx, y0 - 0.08 * dy, y1 + 0.08 * dy

    def px(x):
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return H - B - (y - y0) / (y1 - y0) * (H - T - B)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif"'
         ' font-size="11">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="18" font-size="13">kiln search: test accuracy vs tuned latency of the '
         'replaced layers</text>' % L,
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B)]
    for i in range(6):
        x = x0 + (x1 - x0) * i / 5
        y = y0 + (y1 - y0) * i / 5
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>'
                 '<text x="%.1f" y="%d" text-anchor="middle">%.3g</text>'
                 % (px(x), H - B, px(x), H - B + 5, px(x), H - B + 18, x))
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>'
                 '<text x="%d" y="%.1f" text-anchor="end">%.2f</text>'
                 % (L - 5, py(y), L, py(y), L - 8, py(y) + 4, y))
    o.append('<text x="%d" y="%d" text-anchor="middle">latency (ms, batch 1, tuned by kiln)'
             '</text>' % ((L + W - R) // 2, H - 12))
    o.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">test '
             'accuracy (%%)</text>' % ((T + H - B) // 2, (T + H - B) // 2))
    if len(front) > 1:
        o.append('<polyline fill="none" stroke="#d62728" stroke-width="1.5" points="%s"/>' % " ".join(
            "%.1f,%.1f" % (px(r["latency_s"] * 1e3), py(r["accuracy"])) for r in front))
    ids = {r["id"] for r in front}
    for r in pts:
        color = "#1f77b4" if r["id"] == BASELINE else "#d62728" if r["id"] in ids else "#999999"
        x, y = px(r["latency_s"] * 1e3), py(r["accuracy"])
        o.append('<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s</title></circle>'
                 % (x, y, color, _esc("%s: %s" % (r["id"], r["design"]))))
        if r["id"] in ids or r["id"] == BASELINE:
            o.append('<text x="%.1f" y="%.1f">%s</text>' % (x + 6, y - 6, _esc(r["id"])))
    o.append("</svg>\n")
    return "\n".join(o)


def _range_arg(s):
    try:
        lo, hi = (float(t) for t in s.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError("expected LO:HI, got %r" % s) from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError("need 0 <= LO <= HI, got %r" % s)
    return [lo, hi]


def _pos(kind):
    def f(s):
        try:
            v = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError("not a number: %r" % s) from None
        if v <= 0:
            raise argparse.ArgumentTypeError("must be positive, got %r" % s)
        return v
    return f


def parser():
    ap = argparse.ArgumentParser(
        prog="kiln search",
        description="Searches kernels that replace the 3x3 convolutions (kiln.Placeholder "
                    "layers) of a network on Fashion-MNIST: sample, screen (NASWOT), tuned "
                    "latency against the tuned convolution, short training with per-epoch "
                    "cut-offs, Pareto front of latency vs accuracy. Resumable: a finished "
                    "candidate in OUT/results.jsonl is never redone.")
    a = ap.add_argument
    a("--out", required=True, help="results directory (created; reused to resume)")
    a("--time-limit", type=_pos(float), default=600, help="seconds for this run (default 600)")
    a("--candidates", type=_pos(int), default=1 << 30, help="stop after N candidates in all")
    a("--max-rounds", type=_pos(int), default=1 << 30, help="stop after N sampling rounds")
    a("--model", default="resnet",
      help="'resnet' (kiln.fmnist's ResNet) or FILE.py:FUNCTION returning an nn.Module with "
           "kiln.Placeholder layers, 1 input channel, 10 classes")
    a("--width", type=_pos(int), default=16, help="the ResNet's first stage channels (16)")
    a("--image-size", type=_pos(int), default=28, help="images resized to SxS (default 28)")
    a("--train", type=_pos(int), default=5000, help="training images (default 5000)")
    a("--test", type=_pos(int), default=2000, help="test images (default 2000)")
    a("--data", default=fmnist.DEFAULT_DIR, help="directory of the IDX files")
    a("--epochs", type=_pos(int), default=2, help="training epochs (default 2)")
    a("--batch-size", type=_pos(int), default=64)
    a("--lr", type=_pos(float), default=3e-3, help="AdamW peak learning rate (3e-3)")
    a("--cutoff", type=float, default=10.0,
      help="drop a candidate this many points behind the best after an epoch (10)")
    a("--seed", type=int, default=1)
    a("--flops", type=_range_arg, default=[0.05, 0.6], metavar="LO:HI",
      help="FLOPs relative to the 3x3 convolutions (default 0.05:0.6)")
    a("--params", type=_range_arg, default=[0.0, 1.0], metavar="LO:HI",
      help="parameters relative to the convolutions (default 0:1)")
    a("--max-ops", type=_pos(int), default=6, help="sampler's primitives before closing (6)")
    a("--min-rf", type=_pos(int), default=3, help="minimum receptive field (3)")
    a("--per-round", type=_pos(int), default=6, help="kernels sampled per round (6)")
    a("--screen-keep", type=_pos(float), default=0.5,
      help="fraction of a round kept by the NASWOT screen (0.5)")
    a("--screen-batch", type=_pos(int), default=64, help="images of the NASWOT minibatch (64)")
    a("--trials", type=_pos(int), default=16, help="kiln tune trials per graph (16)")
    a("--threads", type=_pos(int), default=1, help="threads for tuning, timing and training (1)")
    a("--repeat", type=_pos(int), default=5, help="kiln run --bench repeats (5)")
    a("--min-time", type=_pos(float), default=0.05, help="seconds per timing repeat (0.05)")
    a("--max-latency", type=_pos(float), default=1.0,
      help="train only kernels at most this times the convolution's latency (1.0)")
    a("--quiet", action="store_true", help="no progress lines")
    return ap


def main(argv=None):
    opts = parser().parse_args(argv)
    if opts.screen_keep > 1:
        parser().error("--screen-keep must be in (0, 1]")
    try:
        return Search(opts).run()
    except Error as e:
        print("kiln: %s" % e, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kiln search: interrupted; finished candidates are in %s" % opts.out,
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
