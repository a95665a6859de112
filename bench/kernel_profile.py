"""Kernel-level GPU time per call: ours (built without CUDA graphs) vs torch.compile (the kernels
of reduce-overhead, without its graphs), aggregated by kernel name over 10 runs.

    python bench/kernel_profile.py bert:32,vit:1      (on a GPU; NOCOMPILE=1 skips the peer)

Prints GPU busy ms per call, kernels per call and the top kernels; writes $OUT/kprof.json.
"""
import collections, json, os, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.models import MODELS, cached_onnx, build_model
from bench.peers import Case, build_compile, release_compiled
import tensorsmith
from torch.profiler import profile, ProfilerActivity

out = os.environ.get("OUT", "/tmp")
N = 10

def kernels(fn, label):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(N): fn()
        torch.cuda.synchronize()
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += 1; agg[e.name][1] += e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
    tot = sum(v[1] for v in agg.values()) / N / 1000
    cnt = sum(v[0] for v in agg.values()) / N
    print(f"  {label}: GPU busy {tot:.3f} ms/call, {cnt:.0f} kernels/call")
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])
    for name, (n, us) in rows[:22]:
        print(f"    {us/N/1000:7.4f} ms  x{n/N:5.1f}  {name[:110]}")
    return {name: [n / N, us / N / 1000] for name, (n, us) in rows}

cells = [c.split(":") for c in sys.argv[1].split(",")]
res = {}
for name, b in cells:
    b = int(b)
    spec = MODELS[name]
    rec = cached_onnx(spec, os.path.join(out, "onnx"))
    inputs = spec.make_inputs(b)
    shapes = {i.name: tuple(t.shape) for i, t in zip(spec.inputs, inputs)}
    eng = tensorsmith.build(rec["path"], target="cuda", precision="fp16", input_shapes=shapes, cuda_graphs=False)
    feeds = {i.name: t.cuda() for i, t in zip(spec.inputs, inputs)}
    for _ in range(3): eng.run(feeds)
    print(f"### {name} b{b}: {len(eng.plan.layers)} layers, tactics", dict(collections.Counter(l.tactic for l in eng.plan.layers)))
    ours = kernels(lambda: eng.run(feeds), "ours")
    del eng
    if os.environ.get("NOCOMPILE"):
        res[f"{name}:{b}"] = dict(ours=ours); continue
    case = Case(spec, build_model(spec), inputs, b, "fp16", torch.device("cuda"))
    try:
        peer = build_compile(case, mode="default", warm_rebuild=False)
        comp = kernels(peer.fn, "compile")
    except Exception as e:
        print("compile failed", e); comp = {}
    release_compiled()
    res[f"{name}:{b}"] = dict(ours=ours, compile=comp)
    json.dump(res, open(f"{out}/kprof.json", "w"))
    sys.stdout.flush()
