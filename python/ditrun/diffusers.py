"""A compiled bundle standing in for a diffusers pipeline's transformer.

    pipe = WanPipeline.from_pretrained(...).to("cuda")
    pipe.transformer = CompiledTransformer(ditrun.Bundle(path, device="cuda"), like=pipe.transformer)
    video = pipe(prompt, height=480, width=832, num_frames=81).frames   # the shape compiled for

What the pipelines touch (pipeline_wan.py, pipeline_flux.py, DiffusionPipeline): the component
is a torch.nn.Module (so _execution_device and .to() see it), its `config` (patch_size,
in_channels, guidance_embeds: the replaced model's own config, checked against the one the
bundle was compiled from), `dtype` and `device`, `cache_context(name)` around each call, and the
forward's keyword arguments, returning `(sample,)` or an object with `.sample` as return_dict
asks. Inputs and the output stay on the GPU, on torch's current stream; a forward copies each
input into the bundle's buffers and the output out of them, device to device.

Bundles are compiled per shape: a call whose latents (resolution, frames, batch) differ from the
bundle's is refused naming both. A two-expert bundle (Wan2.2-A14B) is opened once per expert:
`install(pipe, path)` replaces transformer and transformer_2 alike.
"""
import contextlib
import json

import torch

from ._bundle import Bundle, Error

_TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# Arguments the bundle computes from its shape (FLUX's rotary ids) or does not take; accepted
# and not passed on. Anything else that is not a bundle input must be None or empty.
_DERIVED = {"img_ids", "txt_ids", "return_dict", "controlnet_blocks_repeat"}
_NEUTRAL_WHEN_EMPTY = {"attention_kwargs", "joint_attention_kwargs", "controlnet_block_samples",
                       "controlnet_single_block_samples"}


def _plain(x):
    return json.loads(json.dumps(x, default=list))


class CompiledTransformer(torch.nn.Module):
    """bundle: a ditrun.Bundle (or a path, opened with device and expert); like: the pipeline's
    transformer it replaces (its config is kept and checked against the bundle's)."""

    def __init__(self, bundle, like=None, *, device=None, expert=None, config=None):
        super().__init__()
        if not isinstance(bundle, Bundle):
            bundle = Bundle(bundle, device=device, expert=expert)
        self.bundle = bundle
        if like is not None:
            config = like.config
        if config is None:
            raise ValueError("CompiledTransformer needs like= (the transformer it replaces) or config=")
        self._check_config(config)
        self.config = config
        self._inputs = {t.name: t for t in bundle.inputs}
        self._output = bundle.outputs[0].name
        self._cache_context = None

    def _check_config(self, config):
        """The bundle's compiled config against the replaced model's: every field the compile read
        (diffusers' bookkeeping fields aside) must agree."""
        compiled = self.bundle.config or {}
        theirs = dict(config)
        for key, value in compiled.items():
            if key.startswith("_") or key not in theirs:
                continue
            if _plain(theirs[key]) != _plain(value):
                raise Error(1, "INVALID_ARGUMENT", "config '%s': the pipeline's transformer has %r, the bundle was compiled "
                            "with %r (bundle %s)" % (key, theirs[key], value, self.bundle.identity))

    # ---- what diffusers reads ----
    @property
    def dtype(self):
        return _TORCH_DTYPE[self.bundle.description["dtype"]]

    @property
    def device(self):
        if self.bundle.backend == "cuda":
            return torch.device("cuda", self.bundle.device_index)
        return torch.device("cpu")

    def to(self, *args, **kwargs):
        # No weights to move: the bundle lives where it was opened (pipe.to() calls this).
        return self

    @contextlib.contextmanager
    def cache_context(self, name):
        """diffusers' per-branch context ("cond", "uncond"); the bundle keeps no cache between
        calls, so it only records the name."""
        previous, self._cache_context = self._cache_context, name
        try:
            yield
        finally:
            self._cache_context = previous

    # ---- the forward ----
    def _check_shape(self, name, x):
        spec = self._inputs[name]
        if tuple(x.shape) == spec.shape or (name == "timestep" and x.dim() == 1 and x.shape[0] == spec.shape[0]):
            return
        shape = self.bundle.shape
        compiled = ", ".join("%s %s" % (k, v) for k, v in shape.items() if v)
        raise Error(1, "INVALID_ARGUMENT", "input '%s': shape %s, the bundle expects %s: it was compiled for %s and runs "
                    "that shape only (compile another bundle for this call's resolution, frames or batch)"
                    % (name, list(x.shape), list(spec.shape), compiled))

    def forward(self, hidden_states, *args, return_dict=True, **kwargs):
        if args:
            raise TypeError("CompiledTransformer takes keyword arguments after hidden_states (got %d positional)" % len(args))
        given = {"hidden_states": hidden_states}
        for key, value in kwargs.items():
            if key in self._inputs:
                if value is not None:
                    given[key] = value
            elif key in _DERIVED or value is None or (key in _NEUTRAL_WHEN_EMPTY and not value):
                continue
            else:
                raise Error(7, "UNIMPLEMENTED", "argument '%s' is not compiled into the bundle (its inputs: %s)"
                            % (key, ", ".join(self._inputs)))
        for name, x in given.items():
            self._check_shape(name, x)
        sample = self.bundle.forward(**given)[self._output]
        if not return_dict:
            return (sample,)
        from diffusers.models.modeling_outputs import Transformer2DModelOutput
        return Transformer2DModelOutput(sample=sample)

    def extra_repr(self):
        return repr(self.bundle)


def install(pipe, bundle_path, *, device=None, store=None):
    """Replaces pipe.transformer (and pipe.transformer_2 for a two-expert bundle) with the
    bundle's experts, each checked against the model it replaces. Returns pipe."""
    first = Bundle(bundle_path, store=store, device=device, expert="transformer")
    experts = first.description["experts"]
    pipe.transformer = CompiledTransformer(first, like=pipe.transformer)
    if len(experts) == 2:
        if getattr(pipe, "transformer_2", None) is None:
            raise Error(1, "INVALID_ARGUMENT", "the bundle has two experts, the pipeline has no transformer_2")
        second = Bundle(bundle_path, store=store, device=device, expert=experts[1])
        pipe.transformer_2 = CompiledTransformer(second, like=pipe.transformer_2)
    return pipe
