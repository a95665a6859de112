"""Per-Layer profile of benchmark models on the GPU (python bench/layer_profile.py bert:32; ROWS=40 also
prints the first 40 Layers in order): layer ops, tactic and config, ms per Layer without CUDA graphs."""
import collections, json, os, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, os.getcwd())
from bench.models import MODELS, cached_onnx
import tensorsmith

out = os.environ.get("OUT", "/tmp")
cells = [c.split(":") for c in sys.argv[1].split(",")]
for name, b in cells:
    b = int(b)
    spec = MODELS[name]
    rec = cached_onnx(spec, "/tmp/onnxcache")
    path = rec["path"] if "path" in rec else rec.get("file")
    inputs = spec.make_inputs(b)
    shapes = {i.name: tuple(t.shape) for i, t in zip(spec.inputs, inputs)}
    t0 = time.perf_counter()
    eng = tensorsmith.build(path, target="cuda", precision="fp16", input_shapes=shapes)
    tb = time.perf_counter() - t0
    feeds = {i.name: t.cuda() for i, t in zip(spec.inputs, inputs)}
    for _ in range(5): eng.run(feeds)
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ts = []
    for _ in range(50):
        torch.cuda.synchronize(); ev[0].record(); eng.run(feeds); ev[1].record(); torch.cuda.synchronize()
        ts.append(ev[0].elapsed_time(ev[1]))
    ts.sort(); med = ts[len(ts)//2]
    prof = eng.profile(feeds, repeats=20)
    g = eng.plan.graph
    kinds = {l.name: "+".join(n.op_type for n in l.nodes) for l in g.layers}
    shp = {}
    for l in g.layers:
        outs = l.outputs(g)
        shp[l.name] = [list(v.type.shape) if v.type and v.type.shape is not None else None for v in outs][:1]
    cfg = {lp.name: lp.config for lp in eng.plan.layers}
    rows = [dict(layer=n, tactic=t + str(cfg.get(n, "")), ms=ms, ops=kinds.get(n, "?"), out=shp.get(n)) for n, t, ms in prof]
    json.dump(dict(model=name, batch=b, build_s=tb, median_ms=med, layers=rows), open(f"{out}/prof_{name}_{b}.json", "w"), indent=1)
    tot = sum(r["ms"] for r in rows)
    by = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        by[r["tactic"].split("[")[0]][0] += 1; by[r["tactic"].split("[")[0]][1] += r["ms"]
    print(f"### {name} b{b}: build {tb:.1f}s, graph-run median {med:.3f} ms, {len(rows)} layers, profiled sum {tot:.3f} ms")
    for k, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"   {k:32s} n={n:4d} {ms:.3f} ms")
    for r in sorted(rows, key=lambda r: -r["ms"])[:12]:
        print(f"   {r['ms']:.4f} {r['tactic'][:30]:30s} {r['ops'][:60]} {r['out']}")
    sys.stdout.flush()
    if os.environ.get("ROWS"):
        for r in rows[:int(os.environ["ROWS"])]:
            print(f"   {r['ms']:.4f} {r['tactic'][:90]:90s} {r['ops'][:50]} {r['out']}")
