import sys, gc; sys.path.insert(0, "tests/zero_core"); sys.path.insert(0, "tests")
import torch
from multirank import run_ranks
def f(rank, world):
    import zero_core
    from zero_core import StorageTracker
    from test_stage3_memory import make_model, config, _settle
    x = torch.randn(4, 32).bfloat16()
    with StorageTracker() as tracker:
        engine, *_ = zero_core.initialize(model=make_model("dense"), config=config())
        for _ in range(2):
            loss = engine(x).float().pow(2).mean(); engine.backward(loss); engine.step(); _settle(engine)
        del loss; gc.collect()
    out = []
    for key, ref in tracker._seen.items():
        st = ref()
        if st is not None and engine.ledger.category_of(torch.tensor([], dtype=torch.uint8).set_(st)) is None:
            out.append(st.nbytes())
    return out
if __name__ == "__main__":
    print(run_ranks(f, 2))
