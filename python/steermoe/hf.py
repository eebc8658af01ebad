"""Route a Hugging Face transformers MoE model through the steermoe policy library.

    import steermoe, steermoe.hf
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("models/steer-olmoe-tiny", dtype=torch.float32)
    with steermoe.hf.PolicyHarness(model, "psr:lambda=0.3,n=1", cache_slots=32,
                                   calibration="models/steer-olmoe-tiny/calib.smcal") as h:
        logits = model(input_ids).logits      # every row routed by its own logical cache

Supported: OlmoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM (transformers 5.x,
checked with 5.24, whose MoE blocks call `self.gate(hidden_states) -> (router_logits,
top_k_weights, top_k_index)`). Only the gate's top-k selection is replaced: the harness computes
the router logits in float32 (F.linear on float32 copies, the engine's arithmetic), gives them to
steermoe's Step (the engine's C++ routing step, schedule::OffloadStep) and returns the policy's
selected experts and execution weights; attention, experts and everything else are transformers'
own. In a bf16 or f16 model the unpatched gate computes its logits in that dtype, so exact routing
under the harness can pick another expert than the unpatched model where two scores tie within
its rounding (load the model in float32 to compare with it). Not supported: beam search
(generate(num_beams > 1) reorders the KV cache between steps and each row's Step would not
follow it), and two harnesses on one model at once (refused).

Order: transformers owns the layer loop (each MoE block runs for every position before the next),
so each gate call is one layer of the step's layer-major schedule, Step.route_layer(m, tokens, z,
pregate), the same schedule the engine's batched prefill runs (pregate = layer m's router applied
to the MoE input of layer m - 1, computed when layer m - 1 runs; given when the step prefetches).
One Step per batch row, so rows are independent requests.
A forward without a KV cache (or with an empty one) starts new requests: every row's caches go
back to their warm sets. Padding positions (attention_mask == 0) use the model's exact top-k and
do not touch the row's caches. Execution weights come from the policy (the model's own rule,
policy-spec "Weights").
"""
import numpy as np
import torch
import torch.nn.functional as F

from . import RouterSpec, Step, load_calibration, uninformed_calibration

_FAMILIES = {"olmoe": "softmax", "qwen3_moe": "softmax", "deepseek_v3": "sigmoid"}


def _check_family(config):
    mt = getattr(config, "model_type", None)
    if mt not in _FAMILIES:
        raise ValueError(f"config.model_type: expected one of {sorted(_FAMILIES)}, found {mt!r}")
    return mt


def _moe_blocks(model):
    layers = model.model.layers
    blocks = []
    for layer in layers:
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and hasattr(mlp, "gate") and hasattr(mlp, "experts") and \
                hasattr(mlp.gate, "weight"):
            blocks.append(mlp)
    if not blocks:
        raise ValueError("model: expected MoE blocks with a `gate` router and `experts`")
    return blocks


def router_spec(config, moe_layers):
    mt = _check_family(config)
    experts = getattr(config, "num_experts", None) or getattr(config, "n_routed_experts", None) \
        or getattr(config, "num_local_experts")
    deepseek = mt == "deepseek_v3"
    return RouterSpec(experts=int(experts), top_k=int(config.num_experts_per_tok),
                      layers=moe_layers, mode=_FAMILIES[mt],
                      n_group=int(getattr(config, "n_group", 1) or 1) if deepseek else 1,
                      topk_group=int(getattr(config, "topk_group", 1) or 1) if deepseek else 1,
                      norm_topk_prob=bool(getattr(config, "norm_topk_prob", False)),
                      routed_scaling_factor=float(getattr(config, "routed_scaling_factor", 1.0))
                      if deepseek else 1.0,
                      default_window=4 if deepseek else 8)


class PolicyHarness:
    """Installs the policy on `model`'s MoE gates; use as a context manager or call remove().

    record=True keeps, per forward, each row's decisions: self.records[row][m] is a list of
    (selected int32 [K], z float32 [E]) per routed position."""

    def __init__(self, model, policy, cache_slots=0, calibration=None, record=False):
        self.model = model
        _check_family(model.config)  # before looking for blocks a wrapper may not have
        self.blocks = _moe_blocks(model)
        for block in self.blocks:
            if getattr(block.gate, "_steermoe_harness", False):
                raise ValueError("PolicyHarness: one is already installed on this model: remove() "
                                 "it first (their hooks would stack)")
        self.spec = router_spec(model.config, len(self.blocks))
        if calibration is None:
            self.calibration = uninformed_calibration(self.spec)
        elif isinstance(calibration, (str, bytes)) or hasattr(calibration, "__fspath__"):
            self.calibration = load_calibration(calibration)
        else:
            self.calibration = calibration
        self.policy = policy
        self.cache_slots = cache_slots
        # Checks the policy and the cache now (errors before any forward) and asks the step
        # whether it runs part 1, rather than re-deriving that rule here.
        self.prefetches = Step(self.spec, policy, self.calibration, cache_slots).prefetches
        self.sigmoid = self.spec.mode == "sigmoid"
        self.record = record
        self.routers = []
        self.records = []
        self._tokens = None  # int64 [B, S] of the current forward
        self._mask = None    # bool [B, S] positions that are real tokens
        self._shape = None
        self._pregate = [None] * len(self.blocks)
        self._handles = []
        self._saved = []
        self._install()

    # --- installation ---
    def _install(self):
        self._handles.append(self.model.register_forward_pre_hook(self._on_model, with_kwargs=True))
        for m, block in enumerate(self.blocks):
            self._handles.append(block.register_forward_pre_hook(self._pre_block(m)))
            gate = block.gate
            self._saved.append((gate, gate.forward))
            gate.forward = self._gate_forward(m, gate, gate.forward)
            gate._steermoe_harness = True

    def remove(self):
        for h in self._handles:
            h.remove()
        for gate, fwd in self._saved:
            gate.forward = fwd
            gate._steermoe_harness = False
        self._handles, self._saved = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    # --- requests ---
    def new_requests(self, batch_size):
        """Every row starts a new request (warm caches); called automatically for a forward
        without a KV cache or with an empty one."""
        self.routers = [Step(self.spec, self.policy, self.calibration, self.cache_slots)
                        for _ in range(batch_size)]
        for r in self.routers:
            r.reset()
        self.records = [[[] for _ in self.blocks] for _ in range(batch_size)]

    def stats(self):
        return [r.stats() for r in self.routers]

    def _on_model(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            raise ValueError("PolicyHarness: expected input_ids (the policy's token prior reads "
                             "the input token of every position)")
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        past = 0
        if cache is not None and hasattr(cache, "get_seq_length"):
            past = int(cache.get_seq_length())
        if past == 0 or len(self.routers) != ids.shape[0]:
            self.new_requests(ids.shape[0])
        self._tokens = ids.detach().to("cpu", torch.int64).numpy()
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.dim() == 2:
            self._mask = mask[:, -ids.shape[1]:].detach().to("cpu").numpy().astype(bool)
        else:
            self._mask = np.ones(ids.shape, dtype=bool)
        return None

    # --- per layer ---
    def _z(self, gate, h):
        logits = F.linear(h.to(torch.float32), gate.weight.to(torch.float32))
        if not self.sigmoid:
            return logits, logits, None
        scores = logits.sigmoid()
        return logits, scores + gate.e_score_correction_bias.to(torch.float32), scores

    def _pre_block(self, m):
        def hook(module, args):
            h = args[0]
            self._shape = tuple(h.shape[:-1]) if h.dim() == 3 else None
            # Pre-gate of the next MoE layer from this layer's MoE input.
            if self.prefetches and m + 1 < len(self.blocks):
                nxt = self.blocks[m + 1].gate
                _, z, _ = self._z(nxt, h.reshape(-1, h.shape[-1]))
                self._pregate[m + 1] = z.detach().to("cpu").numpy()
            return None
        return hook

    def _gate_forward(self, m, gate, original):
        def forward(hidden_states):
            h = hidden_states.reshape(-1, hidden_states.shape[-1])
            logits, z, ws = self._z(gate, h)
            B, S = self._tokens.shape
            if h.shape[0] != B * S:
                raise RuntimeError(f"gate {m}: {h.shape[0]} positions, expected {B} x {S}")
            zn = z.detach().to("cpu").numpy().reshape(B, S, -1)
            wn = None if ws is None else ws.detach().to("cpu").numpy().reshape(B, S, -1)
            pre = self._pregate[m]
            pre = None if pre is None else pre.reshape(B, S, -1)
            K = self.spec.top_k
            idx = np.empty((B, S, K), dtype=np.int64)
            wts = np.empty((B, S, K), dtype=np.float32)
            exact_idx = exact_w = None
            if not self._mask.all():  # padding: the model's own selection, caches untouched
                _, ew, ei = original(hidden_states)
                exact_w = ew.detach().to("cpu", torch.float32).numpy().reshape(B, S, K)
                exact_idx = ei.detach().to("cpu").numpy().reshape(B, S, K)
            for b in range(B):
                mask = self._mask[b]
                if not mask.all():
                    idx[b, ~mask], wts[b, ~mask] = exact_idx[b, ~mask], exact_w[b, ~mask]
                if not mask.any():
                    continue
                pos = np.nonzero(mask)[0]
                sel, w = self.routers[b].route_layer(
                    m, self._tokens[b, pos], zn[b, pos],
                    pre[b, pos] if self.prefetches and m >= 1 else None,
                    None if wn is None else wn[b, pos])
                idx[b, pos] = sel
                wts[b, pos] = w
                if self.record:
                    for i, s in enumerate(pos):
                        self.records[b][m].append((sel[i], zn[b, s].copy()))
            device = hidden_states.device
            top_k_index = torch.from_numpy(idx.reshape(B * S, K)).to(device)
            top_k_weights = torch.from_numpy(wts.reshape(B * S, K)).to(device, logits.dtype)
            out_logits = logits if self.sigmoid else logits.to(hidden_states.dtype)
            return out_logits, top_k_weights.to(hidden_states.dtype), top_k_index
        return forward
