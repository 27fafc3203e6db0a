"""One request's state, and every transition of its lifecycle, in one place.

The token rule (docs/policies.md): a request knows `num_prompt_tokens + num_output_tokens`
tokens and has computed the KV of `num_computed_tokens` of them. A step gives it
`n <= num_remaining` tokens; when the step brings the computed tokens level with the known ones, the
request emits one output token at the step's end. A fresh request therefore prefills its prompt
(whole, or in chunks) and emits its first token; a decoding request has exactly one token to
compute per step; a request preempted by recompute drops to zero computed tokens and prefills
prompt and outputs again before it emits its next token. It finishes when it has emitted
`max_output_tokens`.

Lifecycle (`state`): the states, and the methods below that move between them, are drawn in
`sim.core.request_state`. Only the engine (`sim.core.engine`, through these methods) changes a
request; policies, routers and metrics read it. Each transition checks the state it starts
from, so an engine bug shows up as an error at the first wrong move rather than as a wrong
number later.

Decode batches. While a request decodes on an instance it is a *member* of that instance's
`DecodeBatch` (`sim.core.decode_batch`), which advances all members by one token per decode step
in O(1): a member stores its computed and output counts as offsets from the batch's step clock,
and the properties below read through the batch. To the reader a member looks exactly like any
other request.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from sim.core.request_parts import BatchView, Evictions, Prefix, SpecTally, Transfer
from sim.core.request_state import (
    ABORTED,
    ARRIVED,
    FINISHED,
    HANDOFF,
    REJECTED,
    RUNNING,
    STATE_NAMES,
    SWAPPED,
    TRANSFERRING,
    WAITING,
)

NAN = math.nan


class Request:
    """A request: its inputs (read-only), its progress and its lifecycle timestamps."""

    __slots__ = (
        "_batch",
        "_computed",
        "_evictions",
        "_kv_blocks",
        "_last_token_s",
        "_max_itl_s",
        "_output",
        "_prefix",
        "_serial",
        "_spec_tally",
        "_sync",
        "_transfer",
        "arrival_s",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "id",
        "instance",
        "max_output_tokens",
        "num_prompt_tokens",
        "predicted_output_tokens",
        "reject_reason",
        "session",
        "state",
        "tier",
    )

    def __init__(
        self,
        id: int,
        arrival_s: float,
        num_prompt_tokens: int,
        max_output_tokens: int,
        tier: str = "default",
        predicted_output_tokens: int = 0,
        *,
        session: int = -1,
        content: Sequence[int] | np.ndarray = (),
        content_unit: int = 0,
        content_tokens: int = 0,
    ) -> None:
        self.id = id
        self.arrival_s = arrival_s
        self.num_prompt_tokens = num_prompt_tokens
        self.max_output_tokens = max_output_tokens  # its true output length
        self.tier = tier  # service tier: queue rank and weight, SLO targets
        self.predicted_output_tokens = predicted_output_tokens  # a predictor's guess (0: none)
        self.state = WAITING
        self._computed = 0  # computed tokens (an offset from the batch clock for members)
        self._output = 0  # emitted tokens (likewise)
        self._kv_blocks = 0  # blocks held in its instance's pool (paged members: derived)
        self._last_token_s = NAN
        self._max_itl_s = 0.0
        self._batch: BatchView | None = None
        self._sync = 0  # members: the batch's gap record this member's gaps start from
        self._serial = 0  # members: which membership the batch's heap entries belong to
        self.first_scheduled_s = NAN
        self.first_token_s = NAN
        self.finish_s = NAN
        self.instance = -1  # the instance that took it (the prefill instance in P/D serving)
        self.reject_reason = ""
        self.session = session  # the multi-turn session it belongs to (-1: none)
        # prefix caching: what its tokens are and what of them the prefix cache holds
        self._prefix = Prefix(content, content_unit, content_tokens)
        # parts made on the first need (most requests never need them): its preemptions and
        # swaps, its speculative verify steps, its P/D hand-off and transfer
        self._evictions: Evictions | None = None
        self._spec_tally: SpecTally | None = None
        self._transfer: Transfer | None = None

    def __repr__(self) -> str:
        return (
            f"Request({self.id}, {STATE_NAMES[self.state]}, computed={self.num_computed_tokens}"
            f"/{self.num_prompt_tokens}+{self.num_output_tokens}, "
            f"out={self.num_output_tokens}/{self.max_output_tokens})"
        )

    # -- progress, read through the decode batch for members ---------------------------------

    @property
    def num_computed_tokens(self) -> int:
        batch = self._batch
        return self._computed if batch is None else batch.clock + self._computed

    @property
    def num_output_tokens(self) -> int:
        batch = self._batch
        return self._output if batch is None else batch.clock + self._output

    @property
    def kv_blocks(self) -> int:
        """Blocks this request holds in its instance's KV pool."""
        batch = self._batch
        if batch is None or not batch.paged:
            return self._kv_blocks
        # a paged member holds exactly the blocks its computed tokens fill (it allocates a
        # block when it crosses a boundary), so the count follows from the clock
        return -(-(batch.clock + self._computed) // batch.block_size)

    @property
    def last_token_s(self) -> float:
        batch = self._batch
        return self._last_token_s if batch is None else batch.last_emit_s

    @property
    def max_itl_s(self) -> float:
        """The longest gap between two consecutive output tokens so far."""
        batch = self._batch
        if batch is None:
            return self._max_itl_s
        return max(self._max_itl_s, batch.max_gap_since(self._sync))

    @property
    def spec_recent_acceptance(self) -> float:
        """Accepted / proposed tokens over its last verify steps (the engine's window), NaN
        until the window is full."""
        spec = self._spec_tally
        recent = spec.recent if spec is not None else None
        if recent is None or len(recent) < (recent.maxlen or 0):
            return NAN
        proposed = accepted = 0
        for p, a in recent:
            proposed += p
            accepted += a
        return accepted / proposed if proposed else NAN

    @property
    def num_known_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def num_remaining(self) -> int:
        """Tokens to compute before the next output token is emitted."""
        return self.num_prompt_tokens + self.num_output_tokens - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        """Its prompt is done and one token remains: the next step decodes it."""
        return self.num_output_tokens > 0 and self.num_remaining == 1

    @property
    def is_finished(self) -> bool:
        return self.num_output_tokens >= self.max_output_tokens

    @property
    def remaining_work(self) -> int:
        """Tokens still to compute: the rest of its prefill and its missing outputs (the load a
        token-aware router balances)."""
        prefill_left = max(0, self.num_prompt_tokens - self.num_computed_tokens)
        return prefill_left + self.max_output_tokens - self.num_output_tokens

    @property
    def sequence_tokens(self) -> int:
        """Tokens of its whole sequence, prompt plus true output: the most KV it can need."""
        return self.num_prompt_tokens + self.max_output_tokens

    def block_hashes(self, block_size: int) -> tuple[int, ...]:
        """Chained hashes of its full blocks whose content is known (prompt, and outputs where
        the workload knows them): block b's hash covers the content of blocks 0..b, so equal
        hashes mean equal prefixes, as in vLLM's automatic prefix caching."""
        return self._prefix.block_hashes(block_size)

    # -- what its parts hold ---------------------------------------------------------------------

    @property
    def content(self) -> Sequence[int] | np.ndarray:
        """A content id per `content_unit` tokens (equal ids: equal tokens)."""
        return self._prefix.content

    @property
    def content_unit(self) -> int:
        return self._prefix.unit

    @property
    def content_tokens(self) -> int:
        """How many of its tokens the content describes."""
        return self._prefix.tokens

    @property
    def cached_blocks(self) -> list[int]:
        """Hashes of the cached blocks it holds (the KV pool's to change)."""
        return self._prefix.cached_blocks

    @property
    def kv_scanned(self) -> int:
        """Leading full blocks the prefix cache has looked at for caching."""
        return self._prefix.scanned

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens it found cached at its admissions."""
        return self._prefix.cached_tokens

    @property
    def num_preemptions(self) -> int:
        evictions = self._evictions
        return 0 if evictions is None else evictions.preemptions

    @property
    def num_recomputed_tokens(self) -> int:
        """Tokens prefilled again after recompute preemptions."""
        evictions = self._evictions
        return 0 if evictions is None else evictions.recomputed_tokens

    @property
    def num_swaps(self) -> int:
        evictions = self._evictions
        return 0 if evictions is None else evictions.swaps

    @property
    def swapped_bytes(self) -> int:
        """KV bytes copied to host memory over all its swaps."""
        evictions = self._evictions
        return 0 if evictions is None else evictions.swapped_bytes

    @property
    def host_bytes(self) -> int:
        """KV bytes it holds in host memory now."""
        evictions = self._evictions
        return 0 if evictions is None else evictions.host_bytes

    def _evicted(self) -> Evictions:
        evictions = self._evictions
        if evictions is None:
            evictions = self._evictions = Evictions()
        return evictions

    @property
    def num_spec_steps(self) -> int:
        """Speculative verify steps."""
        spec = self._spec_tally
        return 0 if spec is None else spec.steps

    @property
    def num_spec_proposed(self) -> int:
        spec = self._spec_tally
        return 0 if spec is None else spec.proposed

    @property
    def num_spec_accepted(self) -> int:
        spec = self._spec_tally
        return 0 if spec is None else spec.accepted

    @property
    def decode_instance(self) -> int:
        """P/D: the decode instance its KV moved to (-1: none)."""
        transfer = self._transfer
        return -1 if transfer is None else transfer.decode_instance

    @property
    def handoff_s(self) -> float:
        """P/D: its prompt was done and its KV waited for the link from then."""
        transfer = self._transfer
        return NAN if transfer is None else transfer.handoff_s

    @property
    def transfer_start_s(self) -> float:
        transfer = self._transfer
        return NAN if transfer is None else transfer.start_s

    @property
    def transfer_end_s(self) -> float:
        transfer = self._transfer
        return NAN if transfer is None else transfer.end_s

    # -- transitions (engine only) --------------------------------------------------------------

    def arrive(self, instance: int) -> None:
        """It reaches an instance (the prefill instance in P/D serving)."""
        self._expect(WAITING)
        self.instance = instance

    def _expect(self, *states: int) -> None:
        if self.state not in states:
            wanted = " or ".join(STATE_NAMES[s] for s in states)
            raise AssertionError(f"request {self.id} is {STATE_NAMES[self.state]}, not {wanted}")

    def reject(self, reason: str) -> None:
        self._expect(WAITING)
        self.state = REJECTED
        self.reject_reason = reason

    def abort(self, now: float, *, stranded: bool = False) -> None:
        """Waiting or running -> rejected, \"aborted\": its client gave up at `now`.
        `stranded`: from any state it can still leave (the engine that held it stopped with
        it inside: a live session's close, `sim.serve.live`)."""
        if not stranded:
            self._expect(WAITING, RUNNING)
        elif self.state in (FINISHED, REJECTED):
            raise AssertionError(f"request {self.id} has already left")
        self.state = REJECTED
        self.reject_reason = ABORTED
        self.finish_s = now

    def admit(self, now: float, cached_tokens: int = 0) -> None:
        """Waiting -> running: it gets its first tokens in the step starting at `now`, after
        `cached_tokens` whose KV it found in the prefix cache (it holds their blocks now)."""
        self._expect(WAITING)
        self.state = RUNNING
        if self.first_scheduled_s != self.first_scheduled_s:  # NaN: first time scheduled
            self.first_scheduled_s = now
        if cached_tokens:
            self._computed = cached_tokens
            self._prefix.cached_tokens += cached_tokens

    def compute(self, n: int, start_s: float, end_s: float) -> float | None:
        """Compute `n` tokens in a single step [start_s, end_s] (not as a batch member).

        Returns None when no token is emitted (a prefill chunk), NaN for its first token, and
        otherwise the gap to its previous token, so the caller can pool inter-token gaps."""
        computed = self._computed + n
        known = self.num_prompt_tokens + self._output
        if computed > known:
            left = known - self._computed
            raise AssertionError(f"request {self.id} given {n} tokens, {left} left")
        self._computed = computed
        if computed < known:
            return None
        self._output += 1
        gap = NAN
        if self._output == 1:
            self.first_token_s = end_s
        else:
            gap = end_s - self._last_token_s
            # the longest gap is this one, or the step itself (a token inside a run)
            longest = gap if gap > end_s - start_s else end_s - start_s
            if longest > self._max_itl_s:
                self._max_itl_s = longest
        self._last_token_s = end_s
        return gap

    def verify(
        self, proposed: int, accepted: int, start_s: float, end_s: float, window: int = 0
    ) -> float:
        """A speculative step [start_s, end_s] of a decoding request (not a batch member): the
        target computed its next token and `proposed` lookahead tokens, accepted `accepted` of
        them, and the request emits `accepted + 1` tokens together at the step's end. Returns
        the gap since its previous token (the whole gap: the caller divides it among the
        tokens). `window` > 0 keeps its last `window` verify steps' counts."""
        output = self._output
        if (
            self._batch is not None
            or not output
            or self._computed != self.num_prompt_tokens + output - 1
        ):
            raise AssertionError(f"request {self.id} verified while not a lone decoding request")
        emitted = accepted + 1
        if accepted > proposed or output + emitted > self.max_output_tokens:
            raise AssertionError(
                f"request {self.id}: {accepted} of {proposed} accepted, "
                f"{self.max_output_tokens - self._output} tokens left"
            )
        self._computed += emitted
        self._output += emitted
        gap = end_s - self._last_token_s
        if gap > self._max_itl_s:
            self._max_itl_s = gap
        self._last_token_s = end_s
        if proposed:
            spec = self._spec_tally
            if spec is None:
                spec = self._spec_tally = SpecTally()
            spec.steps += 1
            spec.proposed += proposed
            spec.accepted += accepted
            if window:
                if spec.recent is None:
                    spec.recent = deque(maxlen=window)
                spec.recent.append((proposed, accepted))
        return gap

    def finish(self, end_s: float) -> None:
        self._expect(RUNNING)
        self.state = FINISHED
        self.finish_s = end_s

    def preempt_recompute(self) -> None:
        """Running -> waiting: its KV is dropped (the engine frees the blocks) and it will
        prefill its prompt and its outputs so far again."""
        self._expect(RUNNING)
        self.state = WAITING
        evictions = self._evicted()
        evictions.preemptions += 1
        evictions.recomputed_tokens += self._computed
        self._computed = 0
        self._kv_blocks = 0

    def swap_out(self, nbytes: int) -> None:
        """Running -> swapped: its KV (`nbytes`) is copied to host memory."""
        self._expect(RUNNING)
        self.state = SWAPPED
        evictions = self._evicted()
        evictions.preemptions += 1
        evictions.swaps += 1
        evictions.swapped_bytes += nbytes
        evictions.host_bytes = nbytes
        self._kv_blocks = 0

    def swap_in(self) -> None:
        """Swapped -> running: its KV is copied back (the engine allocated the blocks)."""
        self._expect(SWAPPED)
        self.state = RUNNING
        self._evicted().host_bytes = 0

    def hand_off(self, now: float) -> None:
        """P/D: its prompt is done on a prefill instance; its KV waits there for the link."""
        self._expect(RUNNING)
        self.state = HANDOFF
        self._transfer = Transfer(now)

    def start_transfer(self, now: float, decode_instance: int) -> None:
        self._expect(HANDOFF)
        self.state = TRANSFERRING
        transfer = self._transfer
        assert transfer is not None
        transfer.start_s = now
        transfer.decode_instance = decode_instance

    def land(self, now: float, num_blocks: int) -> None:
        """P/D: its KV has reached the decode instance, where it holds `num_blocks` blocks."""
        self._expect(TRANSFERRING)
        self.state = ARRIVED
        transfer = self._transfer
        assert transfer is not None
        transfer.end_s = now
        self._kv_blocks = num_blocks

    def seat(self) -> None:
        """P/D: a transferred request takes a seat in the decode batch."""
        self._expect(ARRIVED)
        self.state = RUNNING

    def set_kv_blocks(self, num_blocks: int) -> None:
        """The engine's record of the blocks it holds (the pool changes the count, not this)."""
        self._kv_blocks = num_blocks

    def set_kv_scanned(self, num_blocks: int) -> None:
        """The prefix cache's record of how many leading full blocks it has looked at."""
        self._prefix.scanned = num_blocks

    def drop_kv(self) -> None:
        """Its blocks went back to the pool (finished, or left the prefill instance)."""
        self._kv_blocks = 0
