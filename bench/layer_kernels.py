"""The GPU kernels of each Layer, with their device time: each Layer's runner run alone under
torch.profiler, on the inputs of a real run (python bench/layer_kernels.py resnet50:32).

Where kernel_profile.py says which kernels take the time, this says which Layer launches them:
it found the bias passes PyTorch adds after a bias-only cuDNN conv (ResNet's downsample convs)."""
import os, sys, warnings, collections
warnings.filterwarnings("ignore")
import torch
sys.path.insert(0, os.getcwd())
from bench.models import MODELS, cached_onnx
import tensorsmith
from torch.profiler import profile, ProfilerActivity
name, b = sys.argv[1].split(":"); b = int(b)
spec = MODELS[name]
rec = cached_onnx(spec, "/tmp/onnxcache")
inputs = spec.make_inputs(b)
shapes = {i.name: tuple(t.shape) for i, t in zip(spec.inputs, inputs)}
eng = tensorsmith.build(rec["path"], target="cuda", precision="fp16", input_shapes=shapes, cuda_graphs=False)
feeds = {i.name: t.cuda() for i, t in zip(spec.inputs, inputs)}
for _ in range(3): eng.run(feeds)
ex = eng.executor_for(None, shapes)
env = dict(ex.constants); env.update(feeds)
g = eng.plan.graph
ops = {l.name: "+".join(n.op_type for n in l.nodes) for l in g.layers}
tot = 0
with torch.inference_mode():
    for k, (runner, ins, outs, _f) in enumerate(ex.steps):
        args = [env[n] for n in ins]
        for _ in range(3): res = runner(args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(5): runner(args)
            torch.cuda.synchronize()
        ks = collections.defaultdict(float)
        for e in p.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                ks[e.name[:60]] += e.device_time_total / 5
        us = sum(ks.values()); tot += us
        lp = ex.layers[k]
        print(f"{k:3d} {us:7.1f} us {ops[lp.name][:28]:28s} {lp.tactic} {lp.config} " + " | ".join(f"{n} {v:.1f}" for n, v in ks.items()))
        env.update(zip(outs, res))
print(f"total {tot/1000:.3f} ms")
