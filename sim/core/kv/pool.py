"""The KV pool of one instance: GPU blocks, their prefix cache, and the tiers below.

Paged attention (vLLM) hands a request blocks of `block_size` tokens on demand; a contiguous
allocator (static batching, FasterTransformer-style) reserves a request's whole sequence at
admission. Both are this pool: a contiguous allocator is a pool of one-token blocks whose owner
asks for the full reservation up front. GPU blocks are counted, not numbered, so allocation is
O(1). A request's holding is `Request.kv_blocks`; blocks can also be reserved for a request that
is not here yet (a KV transfer in flight). Conservation: free + held + reserved = total.

Prefix caching (`caching=True`; vLLM's automatic prefix caching). A full block is identified by
a chained hash of its content and its prefix's (`Request.block_hashes`). Blocks are reference-
counted: requests sharing a prompt prefix share its blocks. A block whose last holder leaves keeps
its hash and stays cached (free, but still holding its KV); cached free blocks are evicted least
recently freed first, and only when a block is needed and no never-cached free block is left (a
request's blocks are freed tail first, so a prefix's later blocks go before its first ones). An
admitted request takes the longest run of its leading blocks that is cached (never its whole
sequence: at least one token is computed), then the run after it that a lower tier holds
(`sim.core.kv.tiers`), which is loaded into fresh blocks, and computes the rest.

Blocks are cached when computed: a prompt's once its prefill has computed them (a chunk at a
time), a decoding request's whose content the workload knows (a multi-turn session's answers)
when it leaves. A block whose hash is already cached (another request computed the same content
meanwhile) stays a private duplicate, and the request's later blocks are still cached, as in
vLLM. A pool without caching answers every lookup with "nothing cached".

Policies read the pool through `sim.core.plan.KVView`: counts, and questions about hits and
releases (`hits`, `planned_releases`), never its fields. The engine applies plans through the
methods below. Running out is an error here: the policy planned within the free blocks it saw.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence, Set

from sim.core.kv.planning import PlannedReleases
from sim.core.kv.tiers import Tier, TierStack
from sim.core.request import Request

IN_USE, CACHED, MISSING = range(3)
NO_HITS = (0, 0, 0)


class KVPool:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        *,
        caching: bool = False,
        tiers: TierStack | None = None,
    ) -> None:
        if num_blocks < 0 or block_size < 1:
            raise ValueError(f"bad KV pool: {num_blocks} blocks of {block_size} tokens")
        if tiers is not None and not caching:
            raise ValueError("KV tiers below the GPU need prefix caching")
        # fixed figures, read as attributes (the hot path reads block_size often)
        self.num_total = num_blocks
        self.block_size = block_size
        self._total = num_blocks
        self._block_size = block_size
        self._free = num_blocks  # never-cached free blocks
        self._caching = caching
        self._refs: dict[int, int] = {}  # hash of a cached block in use -> its holders
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached free blocks, oldest first
        self._tiers = tiers
        # a step's evictions register their victims' blocks before its admissions load theirs
        # from the tiers: those writes wait until the loads are done (`hold_tier_writes`)
        self._held_writes: list[int] | None = None
        self._now = 0.0
        self.num_evictions = 0
        # admissions' lookups: tokens and full blocks looked up, blocks found on the GPU
        self.lookup_tokens = self.lookup_blocks = self.gpu_hit_blocks = 0
        self.load_wait_s = 0.0  # seconds steps waited on loads from the tiers below

    # -- counts --------------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks a policy may hand out now: never-cached free blocks and cached free ones."""
        return self._free + len(self._lru)

    @property
    def num_used(self) -> int:
        """Blocks held by requests (or reserved for transfers)."""
        return self._total - self._free - len(self._lru)

    @property
    def num_cached_free(self) -> int:
        return len(self._lru)

    def takes_uncached(self, num_blocks: int) -> bool:
        """Whether `num_blocks` more blocks handed out would evict no cached block."""
        return num_blocks <= self._free

    @property
    def capacity_tokens(self) -> int:
        return self._total * self._block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self._block_size)

    def blocks_needed(self, req: Request, num_tokens: int) -> int:
        """Extra blocks `req` needs so that its holding covers `num_tokens` tokens."""
        return max(0, -(-num_tokens // self._block_size) - req.kv_blocks)

    # -- questions, for policies and routers ---------------------------------------------------

    def holders(self, block_hash: int) -> int:
        """Requests holding the cached block (0: free or not cached)."""
        return self._refs.get(block_hash, 0)

    def is_cached(self, block_hash: int) -> bool:
        """Whether the GPU has the block cached (in use or free)."""
        return block_hash in self._refs or block_hash in self._lru

    def may_hold(self, block_hash: int) -> bool:
        """Whether the GPU caches the block or a tier below holds it, readable now or once its
        write is done: a superset of what `cached_prefix` can find of it."""
        if block_hash in self._refs or block_hash in self._lru:
            return True
        return self._tiers is not None and self._tiers.may_hold(block_hash)

    @property
    def shares_tier(self) -> bool:
        """Whether a tier below is shared with other instances (the remote store)."""
        return self._tiers is not None and self._tiers.shared

    def cached_prefix(self, req: Request, limit: int, now: float) -> int:
        """Leading blocks of `req` (at most `limit`) that the GPU holds or a tier below holds
        readable at `now` (a router's question, asked between this pool's steps)."""
        if not self._caching:
            return 0
        hashes = req.block_hashes(self._block_size)[:limit]
        n = 0
        refs, lru = self._refs, self._lru
        for block_hash in hashes:
            if block_hash not in refs and block_hash not in lru:
                break
            n += 1
        if self._tiers is not None and n < len(hashes):
            n += self._tiers.run_length(hashes[n:], now)
        return n

    def hits(
        self, req: Request, limit: int, taken: Set[int], released: Set[int] = frozenset()
    ) -> tuple[int, int, int]:
        """For a plan being drafted: the leading GPU blocks `req` would start from (at most
        `limit`), how many of them are cached free blocks (each leaves the free count), and the
        blocks after them that a lower tier would load. `taken`: hashes this plan's earlier
        admissions hold (in use by then); `released`: hashes this plan's evictions leave cached
        and free (`planned_releases`)."""
        if not self._caching:
            return NO_HITS
        hashes = req.block_hashes(self._block_size)[:limit]
        n = from_free = 0
        refs, lru = self._refs, self._lru
        for block_hash in hashes:
            if block_hash in taken:
                n += 1
            elif block_hash in released:  # in use now, but cached and free once its holders go
                n += 1
                from_free += 1
            elif block_hash in refs:
                n += 1
            elif block_hash in lru:
                n += 1
                from_free += 1
            else:
                break
        lower = 0
        if self._tiers is not None and n < len(hashes):
            lower = self._tiers.run_length(hashes[n:], self._now)
        return n, from_free, lower

    def planned_releases(self) -> PlannedReleases:
        """A fresh account of what a plan's evictions will free (see `PlannedReleases`)."""
        return PlannedReleases(self, self._caching)

    def occupancy(self) -> tuple[int, int, int]:
        """Blocks held by the DRAM, NVMe and remote tiers below."""
        return self._tiers.occupancy() if self._tiers is not None else (0, 0, 0)

    def loaded_blocks(self) -> dict[str, int]:
        """Blocks this instance loaded from each tier below, by tier kind."""
        return dict(self._tiers.loaded) if self._tiers is not None else {}

    @property
    def caching(self) -> bool:
        return self._caching

    def cache_stats(self) -> dict[str, float]:
        """Admissions' lookups: tokens and full blocks looked up, blocks found on the GPU and
        loaded from each tier below (`loaded_<kind>`), evictions, seconds waited on loads."""
        out: dict[str, float] = {
            "tokens": self.lookup_tokens,
            "blocks": self.lookup_blocks,
            "gpu": self.gpu_hit_blocks,
            "evictions": self.num_evictions,
            "load_wait_s": self.load_wait_s,
        }
        for kind, n in self.loaded_blocks().items():
            out[f"loaded_{kind}"] = n
        return out

    def lower_tiers(self) -> tuple[Tier, ...]:
        """The tiers below (a shared store is the same object in every instance's pool)."""
        return self._tiers.tiers if self._tiers is not None else ()

    @property
    def loads_overlap(self) -> bool:
        """Whether loads from lower tiers overlap with the step's compute."""
        return self._tiers is not None and self._tiers.overlap

    # -- changes, by the engine ----------------------------------------------------------------

    def at(self, now: float) -> None:
        """The time of the changes that follow (tier writes and reads are timed)."""
        self._now = now

    def take(self, num_blocks: int) -> None:
        """Hand out blocks: never-cached ones first, then evict the least recently freed."""
        raw = num_blocks if num_blocks <= self._free else self._free
        self._free -= raw
        evict = num_blocks - raw
        if evict:
            lru = self._lru
            if evict > len(lru):
                self._free += raw
                raise AssertionError(f"KV pool: {num_blocks} blocks asked, {raw + len(lru)} free")
            pop = lru.popitem
            gone = [pop(False)[0] for _ in range(evict)]
            self.num_evictions += evict
            if self._tiers is not None:
                self._tiers.evicted(gone, self._now)

    def give_back(self, num_blocks: int) -> None:
        if self.num_used < num_blocks:  # a double free corrupts all that follows
            raise AssertionError(f"KV pool over-freed by {num_blocks} blocks")
        self._free += num_blocks

    def grow(self, req: Request, num_tokens: int) -> int:
        """Grow `req`'s holding to cover `num_tokens` tokens; the number of new blocks."""
        held = req.kv_blocks
        need = -(-num_tokens // self._block_size) - held
        if need <= 0:
            return 0
        self.take(need)
        req.set_kv_blocks(held + need)
        return need

    def shrink(self, req: Request, num_tokens: int) -> int:
        """Return the blocks at the end of `req`'s holding beyond those `num_tokens` tokens
        fill (a speculative step's rejected lookahead); the number freed."""
        held = req.kv_blocks
        extra = held - -(-num_tokens // self._block_size)
        if extra <= 0:
            return 0
        if req.kv_scanned > held - extra:
            raise AssertionError(f"request {req.id}: shrinking into its cached blocks")
        self.give_back(extra)
        req.set_kv_blocks(held - extra)
        return extra

    def lookup(self, req: Request, gpu_hits: int) -> None:
        """Count an admission's lookup: its known tokens, their full blocks, the GPU hits."""
        if self._caching:
            known = req.num_known_tokens
            self.lookup_tokens += known
            self.lookup_blocks += known // self._block_size
            self.gpu_hit_blocks += gpu_hits

    def acquire(self, req: Request, num_blocks: int) -> int:
        """`req` starts from its first `num_blocks` cached GPU blocks; returns how many of them
        were already in use by others (shared: their tokens are stored once)."""
        shared = 0
        hashes = req.block_hashes(self._block_size)[:num_blocks]
        refs, lru = self._refs, self._lru
        for block_hash in hashes:
            count = refs.get(block_hash)
            if count is None:
                del lru[block_hash]  # a KeyError here: the plan's hit was not cached
                refs[block_hash] = 1
            else:
                refs[block_hash] = count + 1
                shared += 1
        req.cached_blocks.extend(hashes)
        req.set_kv_scanned(num_blocks)
        req.set_kv_blocks(req.kv_blocks + num_blocks)
        return shared

    def load(self, req: Request, first: int, num_blocks: int) -> float:
        """Read `req`'s blocks first..first+num_blocks-1 from the tiers below; the seconds. Their
        GPU blocks come with the request's growth, and they are cached as computed tokens."""
        if not num_blocks:
            return 0.0
        assert self._tiers is not None
        hashes = req.block_hashes(self._block_size)[first : first + num_blocks]
        return self._tiers.load(hashes, self._now)

    def register(self, req: Request, upto_tokens: int) -> None:
        """Cache the full blocks among `req`'s first `upto_tokens` computed tokens whose content
        is known; a block someone else cached meanwhile stays a private duplicate."""
        if not self._caching:
            return
        hashes = req.block_hashes(self._block_size)
        full = min(upto_tokens // self._block_size, len(hashes))
        start = req.kv_scanned
        if full <= start:
            return
        new = hashes[start:full]
        req.set_kv_scanned(full)
        refs, lru = self._refs, self._lru
        mine = req.cached_blocks
        if refs.keys().isdisjoint(new) and lru.keys().isdisjoint(new):  # the common case
            refs.update(dict.fromkeys(new, 1))
            mine.extend(new)
            fresh: Sequence[int] = new
        else:
            fresh = [h for h in new if h not in refs and h not in lru]
            for block_hash in fresh:
                refs[block_hash] = 1
            mine.extend(fresh)
        if self._tiers is not None and fresh:
            if self._held_writes is not None:
                self._held_writes.extend(fresh)
            else:
                self._tiers.computed(fresh, self._now)

    def hold_tier_writes(self) -> None:
        """Write nothing down to the tiers until `release_tier_writes`: a plan's admissions
        load the tier hits it counted before its victims' blocks are written (a full tier would
        evict them); the writes then go down in their order, at the same instant."""
        self._held_writes = []

    def release_tier_writes(self) -> None:
        held, self._held_writes = self._held_writes, None
        if held and self._tiers is not None:
            self._tiers.computed(held, self._now)

    def release(self, req: Request) -> int:
        """Return `req`'s blocks: its cached blocks stay cached (free once no one holds them),
        the rest become plain free blocks. Returns the tokens of its cached blocks that others
        still hold (they stay stored)."""
        held = req.kv_blocks
        cached = req.cached_blocks
        shared = 0
        if cached:
            refs, lru = self._refs, self._lru
            pop = refs.pop
            # the tail first, as vLLM does: a prefix's later blocks are evicted before its first
            for block_hash in reversed(cached):
                count = pop(block_hash)
                if count > 1:  # others still hold it
                    refs[block_hash] = count - 1
                    shared += 1
                else:
                    lru[block_hash] = None  # most recently freed: evicted last
        plain = held - len(cached)
        if self._free + plain + len(self._lru) > self._total:
            raise AssertionError(f"KV pool over-freed by request {req.id}")
        self._free += plain
        if cached:
            cached.clear()
        if self._caching:
            req.set_kv_scanned(0)
        req.drop_kv()
        return shared * self._block_size

    # -- checks --------------------------------------------------------------------------------

    def cache_contents(self) -> tuple[dict[int, int], list[int]]:
        """The cached blocks in use (hash -> holders) and the cached free ones, oldest first."""
        return dict(self._refs), list(self._lru)
