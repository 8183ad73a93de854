"""Each running sequence's block table as an int64 tensor, kept from one step to the next.

A decode step needs every sequence's block ids as a tensor (the attention kernels read them by
pointer). Converting a Python list of ints costs time in proportion to the context, every step
(measurements: docs/design/engine.md), for a table that changes only when the sequence begins a
block. `BlockTables` keeps one tensor per sequence with spare room, appends the ids a sequence
gained since the last step, and hands out a view of the ids in use: vLLM's persistent block
table, one sequence at a time.

A row is found by the identity of the sequence's own list (Sequence.block_ids, which SeqSlice
carries) and trusted only if the list still starts with the ids it copied: a list whose leading
ids changed (a resume that got other blocks) or a new list at a reused address gets a new tensor.
The ids a view covers are never written again, so a view handed to an earlier step stays true.
Rows of sequences a step does not schedule are dropped at that step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class _Row:
    ids: list[int]  # the ids copied so far (a copy of the sequence's list)
    table: torch.Tensor  # [capacity] int64; the first len(ids) entries are in use


class BlockTables:
    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self._rows: dict[int, _Row] = {}
        self.built = 0  # cumulative tensors made from scratch (tests read it)

    def view(self, block_ids: list[int], seen: dict[int, _Row]) -> torch.Tensor:
        """[len(block_ids)] int64 on the device, equal to block_ids; `seen` collects the rows
        this step uses (`step` keeps those)."""
        key = id(block_ids)
        row = seen.get(key) or self._rows.get(key)
        done = 0 if row is None else len(row.ids)
        if row is None or done > len(block_ids) or block_ids[:done] != row.ids:
            self.built += 1
            row = _Row(
                [], torch.empty(max(16, 2 * len(block_ids)), dtype=torch.int64, device=self.device)
            )
            done = 0
        n = len(block_ids)
        if n > done:
            if n > row.table.numel():
                grown = torch.empty(2 * n, dtype=torch.int64, device=self.device)
                grown[:done] = row.table[:done]
                row.table = grown
            new = block_ids[done:]
            row.table[done:n] = torch.tensor(new, dtype=torch.int64, device=self.device)
            row.ids.extend(new)
        seen[key] = row
        return row.table[:n]

    def step(self, slices_block_ids: list[list[int]]) -> list[torch.Tensor]:
        """One step's tables, in order; rows of sequences not in this step are dropped."""
        seen: dict[int, _Row] = {}
        out = [self.view(ids, seen) for ids in slices_block_ids]
        self._rows = seen
        return out
