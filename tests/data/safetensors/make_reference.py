# Regenerates reference.safetensors with Python's safetensors package; test_safetensors reads
# it and checks that our writer produces the same bytes. Names are chosen so that the
# package's order (dtype first, then name) equals our order (name).
import torch
from safetensors.torch import save_file

tensors = {
    "a_i64": torch.tensor([1 << 40, -5, 7], dtype=torch.int64),
    "b_f32": (torch.arange(6, dtype=torch.float32) * 0.5 - 1.0).reshape(2, 3),
    "c_i32": torch.tensor([[1, -2], [3, -4]], dtype=torch.int32),
    "d_bf16": torch.tensor([[3.0], [-0.5]], dtype=torch.bfloat16),
    "e_scalar": torch.tensor(2.5, dtype=torch.bfloat16),
    "f_f16": torch.tensor([1.5, -2.0, 0.25], dtype=torch.float16),
    "g_empty": torch.zeros((0, 3), dtype=torch.float16),
}
save_file(tensors, "reference.safetensors", metadata={"format": "pt"})
