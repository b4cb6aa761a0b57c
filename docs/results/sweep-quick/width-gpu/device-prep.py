# Build the data cache of the quick sweep preset once (NORMLAB_CACHE), before several sweeps start and race to build it.
import dataclasses, time
from normlab.experiments.sweep import sweep_scale, sweep_runs
from normlab.experiments.figures import Context
from normlab.data import prepare
cfg = dataclasses.replace(sweep_scale("quick"), seeds=5, widths=(64,128,256,512), schemes=("post",), warmups=("none",))
ctx = Context(translation_updates_per_epoch=1, corpus="", device="cuda", precision="auto")
first = sweep_runs(cfg, ctx)[0].config
t=time.time(); prepare(first.data, first.model.max_positions); print("prep", time.time()-t)
