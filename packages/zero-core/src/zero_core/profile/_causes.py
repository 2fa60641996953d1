"""In words, why the estimate and the measurement differ on one category in one phase."""
from __future__ import annotations

from zero_plugins import Category

# (category, the estimate is higher) -> the cause; the first word of a category stands for its kind.
_CAUSES: dict[tuple[str, bool], str] = {
    (Category.PARAM_GATHERED_HELD, False): "held weights: gathered weights kept alive after their release by autograd's "
                                    "saved views (memory_efficient_linear false saves the weight for backward)",
    (Category.PARAM_GATHERED_HELD, True): "the estimator expects held weights that autograd did not keep here",
    (Category.PARAM_GATHERED, True): "the estimator gathers more weights at once than the engine keeps (or files held "
                              "weights here, which the ledger names param.gathered.held)",
    (Category.PARAM_GATHERED, False): "more weights gathered at once than estimated (prefetching ahead of use)",
    (Category.GRAD_BUCKET, True): "a reduce bucket the engine does not allocate here (stages 0-1 reduce in the gradient "
                           "buffers; stage 3 packs whole units, so a bucket may stop short of its cap)",
    (Category.GRAD_BUCKET, False): "reduce buckets in flight beyond the estimate",
    ("comm", True): "communication buffers the engine never allocates (it all-gathers in place)",
    (Category.ACTIVATIONS, False): "activations and backward transients the estimator does not model (the loss's fp32 "
                            "log-softmax and its gradient, activation gradients, fp32 softmax in 16-bit attention)",
    (Category.ACTIVATIONS, True): "the estimator counts activations the model does not keep (dropout masks of a model "
                           "without dropout) or holds them all at one instant",
    (Category.OTHER, False): "temporaries outside the engine's buffers: in the step, torch's optimizer makes "
                      "parameter-sized fp32 temporaries (AdamW: exp_avg_sq.sqrt() and the division)",
    (Category.OTHER, True): "temporaries the estimator expects and the engine does not make",
    ("optim", True): "optimizer state the engine creates only at the first step (init), or sizes differently",
    ("optim", False): "optimizer copies larger than the estimator's formula",
}


def cause(category: str, estimate_higher: bool, phase: str) -> str:
    """The likely cause of a gap on `category` in `phase`."""
    if category == Category.OPTIM_STATE and phase == "init" and estimate_higher:
        return "the optimizer state is created at the first step, not by initialize"
    for key in (category, category.split(".")[0]):
        if (key, estimate_higher) in _CAUSES:
            return _CAUSES[(key, estimate_higher)]
    side = "above" if estimate_higher else "below"
    return f"the estimator's {category} lines are {side} what the engine holds"
