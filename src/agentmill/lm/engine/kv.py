"""Per-request KV caches with O(1) truncation [R].

Each sequence owns, per layer, one tensor ``[2, n_kv, capacity, head_dim]`` and a length pointer. Appending writes
a slice; ``truncate`` only moves the pointer, so rejected draft tokens cost nothing to roll back (later appends
overwrite the stale rows). Capacity grows by doubling, and every byte is counted against a budget so that an
overloaded server refuses work instead of swapping.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class KVBudgetError(RuntimeError):
    """Allocating more KV would exceed the engine's byte budget."""


@dataclass
class _Seq:
    layers: list[Any]           # per layer: tensor [2, n_kv, capacity, head_dim]
    length: int = 0
    capacity: int = 0
    bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class KVPool:
    """All sequences' caches. Not thread-safe: one engine thread owns it."""

    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *, dtype: Any, budget_bytes: int,
                 max_len: int, initial_capacity: int = 64):
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.dtype, self.budget_bytes, self.max_len = dtype, budget_bytes, max_len
        self.initial_capacity = initial_capacity
        self._seqs: dict[int, _Seq] = {}
        self._next_id = 0
        self.used_bytes = 0

    # ------------------------------------------------------------------ lifecycle
    def new_sequence(self) -> int:
        sid = self._next_id
        self._next_id += 1
        self._seqs[sid] = _Seq(layers=[None] * self.num_layers)
        return sid

    def free(self, seq: int) -> None:
        s = self._seqs.pop(seq, None)
        if s is not None:
            self.used_bytes -= s.bytes

    def __contains__(self, seq: int) -> bool:
        return seq in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def seq_len(self, seq: int) -> int:
        return self._get(seq).length

    def truncate(self, seq: int, length: int) -> None:
        """Forget every position >= ``length`` (O(1))."""
        s = self._get(seq)
        if not 0 <= length <= s.length:
            raise ValueError(f"truncate to {length}: sequence {seq} has length {s.length}")
        s.length = length

    # ------------------------------------------------------------------ data
    def reserve(self, seq: int, n_new: int) -> None:
        """Make room for ``n_new`` more positions (doubling), checking the length limit and the byte budget."""
        import torch

        s = self._get(seq)
        need = s.length + n_new
        if need > self.max_len:
            raise ValueError(f"sequence {seq} would reach {need} tokens, over max_model_len={self.max_len}")
        if need <= s.capacity:
            return
        cap = max(self.initial_capacity, s.capacity)
        while cap < need:
            cap *= 2
        cap = min(cap, self.max_len)
        per_pos = self.num_layers * 2 * self.num_kv_heads * self.head_dim * torch.tensor([], dtype=self.dtype
                                                                                          ).element_size()
        grow = (cap - s.capacity) * per_pos
        if self.used_bytes + grow > self.budget_bytes:
            raise KVBudgetError(f"KV budget {self.budget_bytes} bytes exceeded ({self.used_bytes} used, "
                                f"{grow} more needed)")
        for i in range(self.num_layers):
            t = torch.zeros((2, self.num_kv_heads, cap, self.head_dim), dtype=self.dtype)
            if s.layers[i] is not None and s.length:
                t[:, :, : s.length] = s.layers[i][:, :, : s.length]
            s.layers[i] = t
        s.capacity, s.bytes = cap, s.bytes + grow
        self.used_bytes += grow

    def write(self, seq: int, layer: int, start: int, k: Any, v: Any) -> None:
        """Store k, v ``[n_kv, n, head_dim]`` at positions start..start+n (capacity must be reserved)."""
        t = self._get(seq).layers[layer]
        n = k.shape[1]
        t[0, :, start: start + n] = k
        t[1, :, start: start + n] = v

    def view(self, seq: int, layer: int, length: int) -> tuple[Any, Any]:
        """K and V ``[n_kv, length, head_dim]`` of the first ``length`` positions (views, no copy)."""
        t = self._get(seq).layers[layer]
        return t[0, :, :length], t[1, :, :length]

    def snapshot(self, seq: int, length: int) -> list[Any]:
        """Copies of every layer's K/V for the first ``length`` positions (a prefix cache's entry)."""
        s = self._get(seq)
        if not 0 < length <= s.length:
            raise ValueError(f"snapshot of {length} positions: sequence {seq} has length {s.length}")
        return [t[:, :, :length].clone() for t in s.layers]

    def restore(self, seq: int, snap: list[Any]) -> None:
        """Write a ``snapshot`` into an empty sequence whose capacity is reserved, and set its length."""
        s = self._get(seq)
        n = int(snap[0].shape[2])
        if s.length or n > s.capacity or len(snap) != self.num_layers:
            raise ValueError(f"restore {n} positions into sequence {seq} (length {s.length}, capacity {s.capacity})")
        for t, kv in zip(s.layers, snap):
            t[:, :, :n] = kv
        s.length = n

    def set_length(self, seq: int, length: int) -> None:
        s = self._get(seq)
        if length > s.capacity:
            raise ValueError("length beyond reserved capacity")
        s.length = length

    def _get(self, seq: int) -> _Seq:
        try:
            return self._seqs[seq]
        except KeyError:
            raise KeyError(f"unknown or freed sequence {seq}") from None
