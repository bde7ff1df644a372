/*
 * ebbfs reclamation protocol: a Promela model (issue 14).
 *
 * docs/model/README.md maps every step below (the labels in comments,
 * e.g. [F1], [C2], [D3]) to the Go function that implements it, and lists
 * the abstractions. docs/model/check.sh runs the configurations, the
 * mutants and the findings.
 *
 * Time is discrete: one tick stands for 30 s (the grace margin), so the
 * 60 s floor is FLOOR=2 ticks. Deadlines, read ages and checkpoint ages
 * are bounded countdowns/counters, so the state space is finite.
 *
 * Switches (-D...):
 *   MUTANT_COUNTER_BEFORE_DELETE  counter removed before the DELETE
 *   MUTANT_REPOINT_BEFORE_UPLOAD  repack repoints before its output is uploaded
 *   MUTANT_DRAIN_SAME_CYCLE       a drained repack source is deleted in the same cycle
 *   MUTANT_CUTOFF_BEFORE_FLUSH    cutoff and counter scan taken before seal + barrier
 *   MUTANT_NO_SPAN_GRACE          deadline = floor only, without the checkpoint span
 *   MUTANT_DELETE_BEFORE_BARRIER  no barrier between the deletion check and the DELETE
 *   STALLS                        the journal PUT may stall (store PUT outage)
 *   NOREPLICA                     no replica, no in-flight reads, no reader record
 *   EPHEMERAL_CREATE              the admin creates an ephemeral checkpoint (ttl CSPAN)
 *   REPLICA_PIN_RACE              the replica's record is written after its first view
 *   LIVENESS                      include the liveness claim (run with -a -f)
 *   PATCHES                       writes may be patches: an extent's value is a base
 *                                 frame and a patch frame, each a reference into its
 *                                 segment; a merge folds them into one whole frame
 *   MUTANT_MERGE_NO_GRACE         (with PATCHES) once a merge's commit is journaled, the
 *                                 segment of the patch it folded is deleted at once when
 *                                 nothing current references it, without a deadline
 *   MIRROR                        a mirror (package mirror) copies the durable states in
 *                                 journal order into a second store and deletes what the
 *                                 source dropped only a retention MRET after it copied the
 *                                 drop; its reader-mirror record is in the checkpoint list
 *   MUTANT_MIRROR_NO_RETENTION    (with MIRROR) a drop reaches the mirror at once
 *   MUTANT_MIRROR_JOURNAL_FIRST   (with MIRROR) a journal is copied before the segments it
 *                                 creates
 *   MUTANT_MIRROR_NO_RECORD       (with MIRROR) the mirror keeps no record in the source
 *   STANDBY                       two standbys race for the takeover of a writer that
 *                                 still runs (a zombie until fenced) with a conditional
 *                                 write of the lease; the loser follows; a fenced zombie
 *                                 rejoins as a follower (drops its local state)
 *   MUTANT_TAKEOVER_UNCONDITIONAL (with STANDBY) the takeover's lease write is not
 *                                 conditional: both standbys win the same epoch
 */

#ifndef NE
#define NE 2            /* extents: 2 files of one extent each */
#endif
#define NS 4            /* segment ids 1..NS (segment 1 exists at the start) */
#define NW 2            /* writer slots: the active writer and a zombie */
#ifndef OPS
#define OPS 3           /* user writes and deletes */
#endif
#ifndef CRASHES
#define CRASHES 2       /* writer processes killed */
#endif
#ifndef ZOMBIES
#define ZOMBIES 1       /* takeovers while the old writer still runs */
#endif
#ifndef FAULTS
#define FAULTS 1        /* counter under-counts (a bug the repair path must survive) */
#endif
#ifndef NSTALLS
#define NSTALLS 1
#endif

/* timing, in ticks of 30 s */
#define FLOOR   2       /* checkpoint.GraceFloor (60 s) */
#define MARGIN  1       /* checkpoint.GraceMargin (30 s) */
#define RSPAN   3       /* the replica record's span (TTL 90 s) */
#define CSPAN   4       /* an admin ephemeral checkpoint's ttl (2 min) */
#define MPR     1       /* checkpoint.MaxPublishToRecord (30 s) */
#define FLUSH   1       /* a commit is journaled within this many ticks (periodic barrier) */
#define RREAD   2       /* an in-flight read finishes within this many ticks of its pointer lookup */
#define MRET    2       /* the mirror's retention (7 days in the code; any length here) */
#define MLAG    3       /* the mirror copies a journal within this many ticks (its record's span) */
#define NODL    255
#define AGECAP  7

#define ABSENT  0
#define PRESENT 1
#define GONE    2

#define PERSISTENT 1
#define EPHEMERAL  2

#define BIT(s) (1 << (s))

/* ---------------- the object store ---------------- */
byte obj[NS+1];                 /* ABSENT, PRESENT, GONE */
byte fv[(NS+1)*NE];             /* frame version of extent e in segment s (0: none) */
#define FV(s,e) fv[(s)*NE+(e)]
byte nextid = 2;                /* segment ids grow across restarts */
bool everdur[NS+1];             /* ghost: a counter for s was ever durable */
bool stall;                     /* journal PUTs fail (STALLS only) */

/* durable metadata: the state the journal objects describe; an
   extent's value is a base (dseg, dver) and, with PATCHES, a patch
   (dpseg, dpver; segment 0: none), newer than the base */
byte dseg[NE]; byte dver[NE];
byte dpseg[NE]; byte dpver[NE];
bool dhas[NS+1]; short dlive[NS+1];
byte jlast;                     /* slot whose epoch owns the next journal sequence */
bool jnew;                      /* a journal was written since the recovering writer replayed */
byte gver[NE];                  /* last version written per extent */
byte ackv[NE];                  /* ghost: version last acknowledged by a barrier */

/* ---------------- writer slots ---------------- */
bool alive[NW]; bool ready[NW]; bool fenced[NW];
byte aw;                        /* slot holding the lease */
byte idlimit[NW];               /* ids this slot knows (zombie: frozen at takeover) */
byte cseg[NW*NE]; byte cver[NW*NE];
#define CS(w,e) cseg[(w)*NE+(e)]
#define CV(w,e) cver[(w)*NE+(e)]
byte cpseg[NW*NE]; byte cpver[NW*NE];      /* the current patch of extent e (PATCHES) */
#define CP(w,e) cpseg[(w)*NE+(e)]
#define CPV(w,e) cpver[(w)*NE+(e)]
bool chas[NW*(NS+1)]; short clive[NW*(NS+1)]; byte dl[NW*(NS+1)];
#define CH(w,s) chas[(w)*(NS+1)+(s)]
#define CL(w,s) clive[(w)*(NS+1)+(s)]
#define DL(w,s) dl[(w)*(NS+1)+(s)]
byte dirty[NW*NE]; byte flushing[NW*NE];
#define DI(w,e) dirty[(w)*NE+(e)]
#define FL(w,e) flushing[(w)*NE+(e)]
bool dpatch[NW*NE]; bool fpatch[NW*NE];   /* the dirty / in-flight buffer is a patch */
#define DP(w,e) dpatch[(w)*NE+(e)]
#define FP(w,e) fpatch[(w)*NE+(e)]
byte mdrop[NW];                 /* MUTANT_MERGE_NO_GRACE: patch segments a merge folded */
bool pend[NW]; byte pendAge[NW];
byte inflight[NW];
byte fph[NW]; byte fseg[NW];
byte cph[NW]; byte cutoff[NW]; byte grace[NW]; bool paused[NW];
byte due[NW]; byte cand[NW]; byte cs[NW]; byte dph[NW];
byte rph[NW]; byte rsrc[NW]; byte rout[NW]; byte rmask[NW]; bool rfail[NW];
byte sph[NW]; byte shor[NW]; byte ss[NW]; bool sweepturn[NW];
bool trig[NW]; bool sfail[NW];                  /* a cycle trigger is pending (dead bytes, a seal, a deadline, a retry) */

/* ---------------- environment ---------------- */
byte ops = OPS; byte crashes = CRASHES; byte zombies = ZOMBIES; byte faults = FAULTS;
byte stalls = NSTALLS;
bool quiet;                     /* writes, crashes and faults have stopped for good */

/* checkpoint made by the admin (checkpoint.Create) */
byte ckph; byte ckkind; bool ckrec; byte ckage; byte ckseg[NE]; byte ckpseg[NE];
#ifdef STANDBY
/* the lease record (its epoch stands for its ETag: no heartbeat is
   modelled, so only a takeover changes it), each writer slot's epoch,
   each standby's progress (1 read the lease, 2 won, 3 lost: follows)
   and the epoch it read; ghost: the slot (+1) that journaled in each
   epoch */
byte lep = 1; byte ep[NW];
byte sbst[2]; byte sbep[2];
byte jby[4];
#endif
/* the replica (or an in-flight read of the writer) */
bool rrec = 1;                  /* the replica's ephemeral record is in the list */
byte vph; byte vseg; byte vage;

#ifdef MIRROR
/* ---------------- the mirror ---------------- */
/* A mirror point is the durable state after one journal, as copied. The
   points the mirror holds are kept as the segments they reference, one
   mask per tick of copy time: mret[a] is the union over the points copied
   a ticks ago (a < MRET: within the retention; older ones fall out), and
   mnewest is the newest point's (the state a mount opens now, whatever its
   age). */
byte mhas;                      /* segments in the mirror store */
byte mnewest;                   /* segments the newest point references */
byte mret[MRET];                /* segments the points within the retention reference */
byte mdl[NS+1];                 /* a drop's retention, counted down in ticks (NODL: none) */
/* journals the source made durable that the mirror has not copied: the
   segments they create, the segments their points reference (all, and the
   newest's), the counters they remove; mqage: ticks since the oldest */
bool mqn; byte mqnew; byte mqref; byte mqlast; byte mqdrop; byte mqage;
#define DMASK ((BIT(dseg[0]) | BIT(dseg[1]) | BIT(dpseg[0]) | BIT(dpseg[1])) & ~1)
#define MRETAINED (mnewest | mret[0] | mret[1])
#define MINV ((MRETAINED & ~mhas) == 0)
#define MURGENT (mqn && mqage >= MLAG)
#else
#define MINV 1
#define MURGENT 0
#endif

/* ---------------- helpers ---------------- */
#define NFR(s) ((FV(s,0) != 0) + (FV(s,1) != 0))
#define REFS(w,s) ((CS(w,0) == (s)) + (CS(w,1) == (s)) + (CP(w,0) == (s)) + (CP(w,1) == (s)))
/* the newest version an extent's value holds: its patch's, else its base's */
#define NEWV(w,e) (CP(w,e) != 0 -> CPV(w,e) : CV(w,e))
#define DNEWV(e) (dpseg[e] != 0 -> dpver[e] : dver[e])
#define NODIRTY(w) (DI(w,0) == 0 && DI(w,1) == 0)

/* the safety property at every DELETE of segment s */
inline check_delete(s) {
	/* current state of the lease holder, and the durable state */
	assert(!ready[aw] || (CS(aw,0) != s && CS(aw,1) != s && CP(aw,0) != s && CP(aw,1) != s));
	assert(dseg[0] != s && dseg[1] != s && dpseg[0] != s && dpseg[1] != s);
	/* a checkpoint's manifest: persistent while its record exists,
	   ephemeral while it has not expired */
	assert(!(ckrec && (ckkind == PERSISTENT || ckage < CSPAN) && (ckseg[0] == s || ckseg[1] == s || ckpseg[0] == s || ckpseg[1] == s)));
	/* a read in flight (replica view, or the writer's own read) */
	assert(!(vph == 1 && vseg == s && vage <= RREAD));
}

inline do_delete(s) {
	check_delete(s);
	obj[s] = GONE
}

/* [J] lsm.(*DB).Barrier: journal everything committed, put-if-absent on
   the next sequence; losing it fences the writer. */
#ifdef STANDBY
/* at most one writer journals (acknowledges) in an epoch */
#define EPOCH_ONE(w) assert(jby[ep[w]] == 0 || jby[ep[w]] == (w) + 1); jby[ep[w]] = (w) + 1
#else
#define EPOCH_ONE(w) skip
#endif
inline journal(w) {
	if
	:: jlast == w ->
		EPOCH_ONE(w);
		dseg[0] = CS(w,0); dver[0] = CV(w,0); dseg[1] = CS(w,1); dver[1] = CV(w,1);
		dpseg[0] = CP(w,0); dpver[0] = CPV(w,0); dpseg[1] = CP(w,1); dpver[1] = CPV(w,1);
		if :: NEWV(w,0) > ackv[0] -> ackv[0] = NEWV(w,0) :: else fi;
		if :: NEWV(w,1) > ackv[1] -> ackv[1] = NEWV(w,1) :: else fi;
#ifdef MIRROR
		/* the journal object the mirror will copy: the counters it
		   creates and removes, the state it makes durable */
		k = 1;
		do
		:: k <= NS ->
			if
			:: !dhas[k] && CH(w,k) -> mqnew = mqnew | BIT(k)
			:: dhas[k] && !CH(w,k) -> mqdrop = mqdrop | BIT(k)
			:: else
			fi;
			k++
		:: else -> break
		od;
		mqref = mqref | DMASK; mqlast = DMASK;
		if :: !mqn -> mqn = 1; mqage = 0 :: else fi;
#endif
		k = 1;
		do
		:: k <= NS -> dhas[k] = CH(w,k); dlive[k] = CL(w,k);
			if :: CH(w,k) -> everdur[k] = 1 :: else fi; k++
		:: else -> break
		od;
		k = 0;
		pend[w] = 0; pendAge[w] = 0; jnew = 1
	:: else -> fenced[w] = 1
	fi
}

/* recovery: manifest + journal replay gives the durable state */
inline replay(w) {
	CS(w,0) = dseg[0]; CV(w,0) = dver[0]; CS(w,1) = dseg[1]; CV(w,1) = dver[1];
	CP(w,0) = dpseg[0]; CPV(w,0) = dpver[0]; CP(w,1) = dpseg[1]; CPV(w,1) = dpver[1];
	DI(w,0) = 0; DI(w,1) = 0; FL(w,0) = 0; FL(w,1) = 0;
	DP(w,0) = 0; DP(w,1) = 0; FP(w,0) = 0; FP(w,1) = 0; mdrop[w] = 0;
	k = 1;
	do
	:: k <= NS -> CH(w,k) = dhas[k]; CL(w,k) = dlive[k]; DL(w,k) = NODL; k++
	:: else -> break
	od;
	k = 0
}

inline kill(w) {
	alive[w] = 0; ready[w] = 0; fenced[w] = 0; pend[w] = 0; pendAge[w] = 0;
	inflight[w] = 0; fph[w] = 0; fseg[w] = 0;
	cph[w] = 0; cutoff[w] = 0; grace[w] = 0; paused[w] = 0; due[w] = 0; cand[w] = 0;
	cs[w] = 0; dph[w] = 0; rph[w] = 0; rsrc[w] = 0; rout[w] = 0; rmask[w] = 0; rfail[w] = 0;
	sph[w] = 0; shor[w] = 0; ss[w] = 0; sweepturn[w] = 0; idlimit[w] = 0; trig[w] = 0; sfail[w] = 0;
	mdrop[w] = 0;
	k = 0;
	do
	:: k < NE -> CS(w,k) = 0; CV(w,k) = 0; DI(w,k) = 0; FL(w,k) = 0;
		CP(w,k) = 0; CPV(w,k) = 0; DP(w,k) = 0; FP(w,k) = 0; k++
	:: else -> break
	od;
	k = 1;
	do
	:: k <= NS -> CH(w,k) = 0; CL(w,k) = 0; DL(w,k) = NODL; k++
	:: else -> break
	od;
	k = 0
}

/* a writer starts in slot w: takes the lease and replays (lsm.open) */
inline start(w) {
	alive[w] = 1; ready[w] = 0; fenced[w] = 0; aw = w;
	replay(w); jnew = 0; trig[w] = 1; sweepturn[w] = 1
}

/* ======================== the engine ======================== */
proctype Engine(byte w)
{
	byte e, k;
	do
	/* [W] write: data in memory only (fs write path) */
	:: atomic { ready[w] && w == aw && ops > 0 && !quiet ->
		if :: e = 0 :: e = 1 fi;
#ifdef PATCHES
		/* a write into part of an extent that is not in memory keeps
		   only its bytes: a patch (fs patchable); one into a buffer
		   keeps the buffer's kind; one into an extent in flight is whole */
		if
		:: DI(w,e) == 0 && FL(w,e) == 0 -> if :: DP(w,e) = 1 :: DP(w,e) = 0 fi
		:: DI(w,e) == 0 && FL(w,e) != 0 -> DP(w,e) = 0
		:: else
		fi;
#endif
		gver[e]++; DI(w,e) = gver[e]; ops--; e = 0 }
	/* [X] delete / punch / small unlink: pointer removed and counter
	   debited in one transaction (a zombie may do this too) */
	:: atomic { ready[w] && ops > 0 && !quiet ->
		if :: e = 0 :: e = 1 fi;
		if
		:: CS(w,e) != 0 -> CL(w,CS(w,e)) = CL(w,CS(w,e)) - 1; trig[w] = 1
		:: else
		fi;
		if
		:: CP(w,e) != 0 -> CL(w,CP(w,e)) = CL(w,CP(w,e)) - 1; trig[w] = 1
		:: else
		fi;
		gver[e]++; CS(w,e) = 0; CV(w,e) = gver[e]; DI(w,e) = 0; FL(w,e) = 0;
		CP(w,e) = 0; CPV(w,e) = 0; DP(w,e) = 0; FP(w,e) = 0;
		pend[w] = 1; ops--; e = 0 }
	/* [F1] seal: allocate an id (in flight), take the dirty extents; [F2] upload */
	:: atomic { ready[w] && w == aw && fph[w] == 0 && !NODIRTY(w) && nextid <= NS ->
		fseg[w] = nextid; nextid++; inflight[w] = inflight[w] | BIT(fseg[w]);
		e = 0;
		do
		:: e < NE -> FV(fseg[w],e) = DI(w,e); FL(w,e) = DI(w,e); DI(w,e) = 0;
			FP(w,e) = DP(w,e); DP(w,e) = 0; e++
		:: else -> break
		od;
		e = 0; obj[fseg[w]] = PRESENT; fph[w] = 2 }
	/* [F3] commit its pointers, debit the old segments, create its counter */
	:: atomic { fph[w] == 2 ->
		e = 0;
		do
		:: e < NE ->
			if
			:: FV(fseg[w],e) != 0 && FL(w,e) == FV(fseg[w],e) ->
				/* a patch drops the older patch it covers (the model
				   keeps one), a whole frame drops the base and the patch */
				if
				:: CP(w,e) != 0 -> CL(w,CP(w,e)) = CL(w,CP(w,e)) - 1;
#ifdef MUTANT_MERGE_NO_GRACE
					if :: !FP(w,e) -> mdrop[w] = mdrop[w] | BIT(CP(w,e)) :: else fi;
#endif
					CP(w,e) = 0; CPV(w,e) = 0
				:: else
				fi;
				if
				:: FP(w,e) -> CP(w,e) = fseg[w]; CPV(w,e) = FV(fseg[w],e)
				:: else ->
					if
					:: CS(w,e) != 0 -> CL(w,CS(w,e)) = CL(w,CS(w,e)) - 1
					:: else
					fi;
					CS(w,e) = fseg[w]; CV(w,e) = FV(fseg[w],e)
				fi;
				CL(w,fseg[w]) = CL(w,fseg[w]) + 1; FL(w,e) = 0; FP(w,e) = 0
			:: else
			fi;
			e++
		:: else -> break
		od;
		e = 0;
		CH(w,fseg[w]) = 1; pend[w] = 1; trig[w] = 1;
		inflight[w] = inflight[w] & ~BIT(fseg[w]); fseg[w] = 0; fph[w] = 0 }
	/* [J] the periodic barrier (and fsync) */
	:: atomic { ready[w] && pend[w] && !fenced[w] && !stall -> journal(w) }
#ifdef PATCHES
	/* [M] merge: a patched extent that nothing in memory holds becomes a
	   whole dirty buffer of its bytes (its newest version); the next
	   seal writes it as one frame and its commit drops base and patch */
	:: atomic { ready[w] && w == aw && !quiet && CP(w,0) != 0 && DI(w,0) == 0 && FL(w,0) == 0 ->
		DI(w,0) = CPV(w,0); DP(w,0) = 0 }
	:: atomic { ready[w] && w == aw && !quiet && CP(w,1) != 0 && DI(w,1) == 0 && FL(w,1) == 0 ->
		DI(w,1) = CPV(w,1); DP(w,1) = 0 }
#endif
#ifdef MUTANT_MERGE_NO_GRACE
	/* once the merge is journaled, the folded patch's segment goes at
	   once if nothing current references it: no deadline, no grace */
	:: atomic { mdrop[w] != 0 && !pend[w] && !fenced[w] ->
		k = 1;
		do
		:: k <= NS ->
			if
			:: (mdrop[w] & BIT(k)) && CH(w,k) && CL(w,k) <= 0 && REFS(w,k) == 0 && obj[k] == PRESENT ->
				do_delete(k); CH(w,k) = 0; CL(w,k) = 0; DL(w,k) = NODL; pend[w] = 1
			:: else
			fi;
			k++
		:: else -> break
		od;
		k = 0; mdrop[w] = 0 }
#endif
	od
}


/* [R4] fs.(*Engine).Repoint: credit the output, move each pointer that
   still equals the old one, debit the source, in one transaction */
inline repoint(w) {
	if
	:: fenced[w] -> rfail[w] = 1; rph[w] = 6
	:: else ->
		CH(w,rout[w]) = 1; e = 0;
		do
		:: e < NE ->
			if
			:: (rmask[w] & BIT(e)) && CS(w,e) == rsrc[w] && CV(w,e) == FV(rsrc[w],e) ->
				CS(w,e) = rout[w]; CL(w,rsrc[w]) = CL(w,rsrc[w]) - 1;
				CL(w,rout[w]) = CL(w,rout[w]) + 1
			:: (rmask[w] & BIT(e)) && CP(w,e) == rsrc[w] && CPV(w,e) == FV(rsrc[w],e) ->
				CP(w,e) = rout[w]; CL(w,rsrc[w]) = CL(w,rsrc[w]) - 1;
				CL(w,rout[w]) = CL(w,rout[w]) + 1
			:: else
			fi;
			e++
		:: else -> break
		od;
		e = 0; pend[w] = 1; trig[w] = 1;
#ifdef MUTANT_REPOINT_BEFORE_UPLOAD
		rph[w] = 4
#else
		rph[w] = 5
#endif
	fi
}

/* ======================== reclamation ======================== */
proctype Reclaimer(byte w)
{
	byte e, k, s;
	do
	/* [C1] cycle start: seal (no dirty data, no flush in progress) */
	:: atomic { ready[w] && trig[w] && cph[w] == 0 && sph[w] == 0 && fph[w] == 0 && (NODIRTY(w) || nextid > NS) ->
		trig[w] = 0;
#ifdef MUTANT_CUTOFF_BEFORE_FLUSH
		cutoff[w] = nextid; cph[w] = 2
#else
		if
		:: pend[w] && stall && !fenced[w] -> cph[w] = 1     /* the barrier waits */
		:: else ->
			if :: pend[w] && !fenced[w] -> journal(w) :: else fi;
			if
			:: fenced[w] -> cph[w] = 0
			:: else ->          /* BarrierCutoff: below every in-flight id */
				cutoff[w] = nextid; s = 1;
				do
				:: s <= NS && (inflight[w] & BIT(s)) -> if :: s < cutoff[w] -> cutoff[w] = s :: else fi; s++
				:: s <= NS && !(inflight[w] & BIT(s)) -> s++
				:: else -> break
				od;
				s = 0; cph[w] = 2
			fi
		fi
#endif
		}
	/* [C2] barrier, fenced check, cutoff */
	:: atomic { cph[w] == 1 && (!pend[w] || !stall || fenced[w]) ->
		if
		:: pend[w] && !fenced[w] -> journal(w)
		:: else
		fi;
		if
		:: fenced[w] -> cph[w] = 0
		:: else ->
			cutoff[w] = nextid; s = 1;
			do
			:: s <= NS && (inflight[w] & BIT(s)) -> if :: s < cutoff[w] -> cutoff[w] = s :: else fi; s++
			:: s <= NS && !(inflight[w] & BIT(s)) -> s++
			:: else -> break
			od;
			s = 0; cph[w] = 2
		fi }
	/* [C3] read the checkpoint list: pause, grace */
	:: atomic { cph[w] == 2 ->
		paused[w] = (ckrec && ckkind == PERSISTENT);
		k = 0;
		if :: rrec -> k = RSPAN :: else fi;
		if :: ckrec && ckkind == EPHEMERAL && CSPAN > k -> k = CSPAN :: else fi;
#ifdef MUTANT_NO_SPAN_GRACE
		grace[w] = FLOOR;
#else
		if :: k > 0 && k + MARGIN > FLOOR -> grace[w] = k + MARGIN :: else -> grace[w] = FLOOR fi;
#endif
		k = 0; cph[w] = 3 }
	/* [C4] counter scan and deadlines */
	:: atomic { cph[w] == 3 ->
		due[w] = 0; cand[w] = 0; e = 0;     /* e: blocked */
		s = 1;
		do
		:: s <= NS ->
			if
			:: CH(w,s) && s < cutoff[w] && CL(w,s) <= 0 ->
				if
				:: paused[w] -> e = 1
				:: !paused[w] && DL(w,s) == NODL -> DL(w,s) = grace[w]
				:: !paused[w] && DL(w,s) == 0 -> due[w] = due[w] | BIT(s)
				:: else
				fi
			:: CH(w,s) && s < cutoff[w] && CL(w,s) > 0 ->
				if
				:: NFR(s) > CL(w,s) ->
					if :: paused[w] -> e = 1 :: else -> cand[w] = cand[w] | BIT(s) fi
				:: else
				fi;
				DL(w,s) = NODL
			:: else -> DL(w,s) = NODL
			fi;
			s++
		:: else -> break
		od;
		s = 0;
		if
		:: e -> cph[w] = 0; due[w] = 0; cand[w] = 0; trig[w] = 1   /* retry after 60 s */
		:: else -> cph[w] = 4; cs[w] = 1
		fi;
		e = 0 }
	/* deleteDue: one due segment at a time */
	:: atomic { cph[w] == 4 && dph[w] == 0 ->
		do
		:: cs[w] <= NS && !(due[w] & BIT(cs[w])) -> cs[w]++
		:: else -> break
		od;
		if
		:: cs[w] > NS -> cph[w] = 5; cs[w] = 0; due[w] = 0
		:: else -> dph[w] = 1
		fi }
	/* [D1] footer + directory GET */
	:: atomic { dph[w] == 1 ->
		if
		:: obj[cs[w]] != PRESENT ->      /* NotFound: drop the stale counter */
			CH(w,cs[w]) = 0; CL(w,cs[w]) = 0; DL(w,cs[w]) = NODL; pend[w] = 1;
			dph[w] = 0; cs[w]++
		/* [D2] pointer check against the current pointers (one view) */
		:: !CH(w,cs[w]) -> dph[w] = 0; cs[w]++
		:: CH(w,cs[w]) && REFS(w,cs[w]) > 0 ->      /* under-count: repair, keep */
			CL(w,cs[w]) = REFS(w,cs[w]); DL(w,cs[w]) = NODL; pend[w] = 1;
			dph[w] = 0; cs[w]++
		:: CH(w,cs[w]) && REFS(w,cs[w]) == 0 && CL(w,cs[w]) > 0 -> dph[w] = 0; cs[w]++
		:: else -> dph[w] = 2
		fi }
#ifndef MUTANT_DELETE_BEFORE_BARRIER
	/* [D2b] barrier between the check and the DELETE: the checked
	   (current) state becomes the durable one; a fenced writer deletes
	   nothing */
	:: atomic { dph[w] == 2 && (!pend[w] || !stall || fenced[w]) ->
		if :: pend[w] && !fenced[w] -> journal(w) :: else fi;
		if
		:: fenced[w] -> dph[w] = 0; cs[w]++
		:: else -> dph[w] = 3
		fi }
#else
	:: atomic { dph[w] == 2 -> dph[w] = 3 }
#endif
#ifndef MUTANT_COUNTER_BEFORE_DELETE
	/* [D3] DELETE the object */
	:: atomic { dph[w] == 3 -> do_delete(cs[w]); dph[w] = 4 }
	/* [D4] then remove its counter */
	:: atomic { dph[w] == 4 ->
		CH(w,cs[w]) = 0; CL(w,cs[w]) = 0; DL(w,cs[w]) = NODL; pend[w] = 1;
		dph[w] = 0; cs[w]++ }
	/* a DELETE that fails keeps the segment and its deadline */
	:: atomic { dph[w] == 3 && !quiet -> dph[w] = 0; cs[w]++; trig[w] = 1 }
#else
	:: atomic { dph[w] == 3 ->
		CH(w,cs[w]) = 0; CL(w,cs[w]) = 0; DL(w,cs[w]) = NODL; pend[w] = 1; dph[w] = 4 }
	:: atomic { dph[w] == 4 -> do_delete(cs[w]); dph[w] = 0; cs[w]++ }
	:: atomic { dph[w] == 4 && !quiet -> dph[w] = 0; cs[w]++; trig[w] = 1 }     /* DELETE failed */
#endif
	/* repack: one job per candidate, lowest id first */
	:: atomic { cph[w] == 5 && rph[w] == 0 ->
		if
		:: cand[w] == 0 || rfail[w] -> cph[w] = 6; cand[w] = 0
		:: else ->
			s = 1;
			do
			:: cand[w] & BIT(s) -> break
			:: else -> s++
			od;
			rsrc[w] = s; cand[w] = cand[w] & ~BIT(s); s = 0; rph[w] = 1
		fi }
	/* [R1] source directory + live frames (pointers exactly into it) */
	:: atomic { rph[w] == 1 ->
		if
		:: obj[rsrc[w]] != PRESENT -> rph[w] = 0
		:: else ->
			rmask[w] = 0; e = 0;
			do
			:: e < NE ->
				if
				:: CS(w,e) == rsrc[w] && CV(w,e) == FV(rsrc[w],e) -> rmask[w] = rmask[w] | BIT(e)
				:: CP(w,e) == rsrc[w] && CPV(w,e) == FV(rsrc[w],e) -> rmask[w] = rmask[w] | BIT(e)
				:: else
				fi;
				e++
			:: else -> break
			od;
			e = 0;
		/* [R2] gather the frames, build the output under a new in-flight id */
		if
		:: rmask[w] == 0 || w != aw || nextid > NS -> rph[w] = 0; rmask[w] = 0
		:: else ->
			rout[w] = nextid; nextid++; inflight[w] = inflight[w] | BIT(rout[w]);
			e = 0;
			do
			:: e < NE ->
				if :: rmask[w] & BIT(e) -> FV(rout[w],e) = FV(rsrc[w],e) :: else fi; e++
			:: else -> break
			od;
			e = 0; rph[w] = 3
		fi
		fi }
	/* [R3] upload the output   [R4] repoint unchanged pointers */
	:: atomic { rph[w] == 3 ->
#ifdef MUTANT_REPOINT_BEFORE_UPLOAD
		repoint(w)
#else
		obj[rout[w]] = PRESENT; rph[w] = 4
#endif
		}
	:: atomic { rph[w] == 3 && !quiet -> rfail[w] = 1; rph[w] = 6; sweepturn[w] = 1 }   /* upload failed: orphan for the sweep */
	:: atomic { rph[w] == 4 ->
#ifdef MUTANT_REPOINT_BEFORE_UPLOAD
		obj[rout[w]] = PRESENT; rph[w] = 5
#else
		repoint(w)
#endif
		}
	/* [R5] SegmentDone: the output leaves the in-flight set */
	:: atomic { rph[w] == 5 || rph[w] == 6 ->
		inflight[w] = inflight[w] & ~BIT(rout[w]);
#ifdef MUTANT_DRAIN_SAME_CYCLE
		/* the drained source is verified and deleted right away */
		if
		:: rph[w] == 5 && CH(w,rsrc[w]) && CL(w,rsrc[w]) <= 0 && REFS(w,rsrc[w]) == 0 && obj[rsrc[w]] == PRESENT ->
			do_delete(rsrc[w]);
			CH(w,rsrc[w]) = 0; CL(w,rsrc[w]) = 0; pend[w] = 1
		:: else
		fi;
#endif
		rout[w] = 0; rsrc[w] = 0; rmask[w] = 0; rph[w] = 0 }
	/* [C5] cycle end */
	:: atomic { cph[w] == 6 ->
#ifdef MUTANT_CUTOFF_BEFORE_FLUSH
		cph[w] = 7
#else
		cph[w] = 0; rfail[w] = 0
#endif
		}
#ifdef MUTANT_CUTOFF_BEFORE_FLUSH
	/* the seal and barrier the mutant moved after the scan; the cycle no
	   longer waits for them (a stalled journal is left to the flusher) */
	:: atomic { cph[w] == 7 ->
		if :: pend[w] && !fenced[w] && !stall -> journal(w) :: else fi;
		cph[w] = 0; rfail[w] = 0 }
#endif
	/* [S1] orphan sweep: fenced check, horizon */
	:: atomic { ready[w] && cph[w] == 0 && sweepturn[w] && sph[w] == 0 ->
		if
		:: fenced[w] -> sweepturn[w] = 0
		:: else ->
			if :: w == aw -> shor[w] = nextid :: else -> shor[w] = idlimit[w] fi;
			s = 1;
			do
			:: s <= NS && (inflight[w] & BIT(s)) -> if :: s < shor[w] -> shor[w] = s :: else fi; s++
			:: s <= NS && !(inflight[w] & BIT(s)) -> s++
			:: else -> break
			od;
			s = 0; ss[w] = 1; sph[w] = 1
		fi }
	/* [S2] list: next counter-less object below the horizon */
	:: atomic { sph[w] == 1 ->
		do
		:: ss[w] <= NS && !(obj[ss[w]] == PRESENT && ss[w] < shor[w] && !CH(w,ss[w])) -> ss[w]++
		:: else -> break
		od;
		if
		:: ss[w] > NS -> sph[w] = 0; ss[w] = 0; shor[w] = 0;
			sweepturn[w] = sfail[w]; sfail[w] = 0     /* an incomplete sweep retries */
		:: else -> sph[w] = 2
		fi }
	/* [S3] directory GET + pointer check */
	:: atomic { sph[w] == 2 ->
		if
		:: obj[ss[w]] != PRESENT || CH(w,ss[w]) -> ss[w]++; sph[w] = 1
		:: obj[ss[w]] == PRESENT && !CH(w,ss[w]) && REFS(w,ss[w]) > 0 ->
			CH(w,ss[w]) = 1; CL(w,ss[w]) = REFS(w,ss[w]); pend[w] = 1; ss[w]++; sph[w] = 1
		/* [S4] DELETE the orphan: only objects that never had a durable counter */
		:: obj[ss[w]] == PRESENT && !CH(w,ss[w]) && REFS(w,ss[w]) == 0 ->
			assert(!everdur[ss[w]]);
			do_delete(ss[w]); ss[w]++; sph[w] = 1
		:: obj[ss[w]] == PRESENT && !CH(w,ss[w]) && REFS(w,ss[w]) == 0 && !quiet ->
			ss[w]++; sph[w] = 1; sfail[w] = 1      /* DELETE failed */
		fi }
	od
}

/* ======================== writers come and go ======================== */
proctype Life()
{
	byte k, w;
	do
	/* a crash (kill -9) of either process, at any step */
	:: atomic { crashes > 0 && alive[0] && !quiet -> crashes--; kill(0) }
	:: atomic { crashes > 0 && alive[1] && !quiet -> crashes--; kill(1) }
	/* [T1] restart: take the lease, recover from the store */
	:: atomic { !alive[aw] -> start(aw) }
	/* [T1] takeover while the old writer still runs (lease expired): a zombie */
	:: atomic { zombies > 0 && !quiet && alive[aw] && ready[aw] && !alive[1 - aw] ->
		zombies--; idlimit[aw] = nextid; w = 1 - aw; start(w); w = 0 }
	/* [T2] epoch-start journal; a journal the zombie wrote meanwhile is replayed first */
	:: atomic { alive[aw] && !ready[aw] && !stall ->
		if
		:: jnew -> replay(aw); jnew = 0
		:: else -> EPOCH_ONE(aw); jlast = aw; ready[aw] = 1;
			assert(NEWV(aw,0) >= ackv[0] && NEWV(aw,1) >= ackv[1])   /* no acknowledged write lost */
		fi }
	/* the zombie's lease heartbeat notices the takeover */
	:: atomic { alive[1 - aw] && !fenced[1 - aw] -> fenced[1 - aw] = 1 }
#ifdef STANDBY
	/* [H2] a standby judged the writer dead: TakeLease, a PUT conditional on the
	   record it read; the winner becomes the writer in a free slot while
	   the old writer still runs (a zombie), the loser follows on */
	:: atomic { (sbst[0] == 1 || sbst[1] == 1) && !quiet && alive[aw] && ready[aw] && !alive[1 - aw] ->
		if :: sbst[0] == 1 -> k = 0 :: sbst[1] == 1 -> k = 1 fi;
#ifdef MUTANT_TAKEOVER_UNCONDITIONAL
		if :: true ->
#else
		if :: sbep[k] == lep ->
#endif
			lep = sbep[k] + 1; sbst[k] = 2;
			idlimit[aw] = nextid; w = 1 - aw; start(w); ep[w] = lep; w = 0
		:: else -> sbst[k] = 3
		fi;
		k = 0 }
	/* [H3] a fenced writer rejoins as a standby: it drops everything
	   local (what no journal took was never acknowledged) and follows */
	:: atomic { alive[1 - aw] && fenced[1 - aw] -> kill(1 - aw) }
#endif
	od
}

#define URGENT ((ready[0] && !fenced[0] && pend[0] && pendAge[0] >= FLUSH && !stall) || \
		(ready[1] && !fenced[1] && pend[1] && pendAge[1] >= FLUSH && !stall) || \
		cph[0] == 3 || cph[1] == 3 || MURGENT)

proctype Clock()
{
	byte k;
	do
	:: atomic { !URGENT ->
		k = 0;
		do
		:: k < NW*(NS+1) ->
			if
			:: dl[k] != NODL && dl[k] > 0 -> dl[k]--;
				if :: dl[k] == 0 -> trig[k / (NS+1)] = 1 :: else fi
			:: else
			fi;
			k++
		:: else -> break
		od;
		k = 0;
		if :: pend[0] && pendAge[0] < FLUSH -> pendAge[0]++ :: else fi;
		if :: pend[1] && pendAge[1] < FLUSH -> pendAge[1]++ :: else fi;
		if :: vph == 1 && vage <= RREAD -> vage++ :: else fi;
		if :: ckph >= 1 && ckage <= CSPAN -> ckage++ :: else fi
#ifdef MIRROR
		;
		if :: mqn && mqage < MLAG -> mqage++ :: else fi;
		mret[1] = mret[0]; mret[0] = 0;     /* MRET = 2 */
		k = 1;
		do
		:: k <= NS -> if :: mdl[k] != NODL && mdl[k] > 0 -> mdl[k]-- :: else fi; k++
		:: else -> break
		od;
		k = 0
#endif
		}
	od
}

#define VLIVE (vph == 1 && vage <= RREAD)

/* a replica reading from the durable state (manifest + journals as of
   its view), or the writer's own read from its current state */
proctype Replica()
{
	byte e;
	do
	:: atomic { vph == 0 && !quiet ->
		if :: e = 0 :: e = 1 fi;
#ifdef PATCHES
		if :: vseg = dseg[e] :: vseg = dpseg[e] fi;    /* either frame of the value */
#else
		vseg = dseg[e];
#endif
		e = 0;
		if :: vseg != 0 -> vph = 1; vage = 0 :: else fi }
#ifdef REPLICA_PIN_RACE
	/* checkpoint.(*Renewer).Start: the record is written after the view */
	:: atomic { vph == 1 && !rrec -> rrec = 1 }
#endif
	:: atomic { VLIVE -> assert(obj[vseg] == PRESENT); vph = 0; vseg = 0; vage = 0 }
	:: atomic { vph == 1 && !VLIVE -> vph = 0; vseg = 0; vage = 0 }   /* out of contract: abandoned */
	od
}

#ifdef MIRROR
#ifdef MUTANT_MIRROR_NO_RETENTION
#define MDROPDL 0
#else
#define MDROPDL MRET
#endif
/* the mirror (mirror.(*Mirror).follow): copies what the source made
   durable, journal by journal, each after the segments it creates; the
   journals that accumulated since its last step are copied in one step
   (their points get the same copy time) */
proctype Mirror()
{
	byte s;
	do
	/* [MC] copy the segments the pending journals create (one the source
	   no longer has is counted missing and skipped); [MJ] then the
	   journals: their states become points, and the segments they drop
	   are deleted a retention later */
	:: atomic { mqn ->
#ifdef MUTANT_MIRROR_JOURNAL_FIRST
		/* the journals are copied first; the segments in a later step */
		mret[0] = mret[0] | mqref; mnewest = mqlast; mqn = 0
	}
	:: atomic { mqnew != 0 && !mqn ->
#endif
		s = 1;
		do
		:: s <= NS ->
			if
			:: (mqnew & BIT(s)) && obj[s] == PRESENT -> mhas = mhas | BIT(s)
			:: else
			fi;
			s++
		:: else -> break
		od;
		mqnew = 0;
#ifndef MUTANT_MIRROR_JOURNAL_FIRST
		mret[0] = mret[0] | mqref; mnewest = mqlast;
#endif
		s = 1;
		do
		:: s <= NS -> if :: (mqdrop & BIT(s)) && mdl[s] == NODL -> mdl[s] = MDROPDL :: else fi; s++
		:: else -> break
		od;
		s = 0; mqn = 0; mqref = 0; mqlast = 0; mqdrop = 0; mqage = 0 }
	/* [MD] a drop whose retention has passed: DELETE from the mirror */
	:: atomic { (mdl[1] == 0 || mdl[2] == 0 || mdl[3] == 0 || mdl[4] == 0) ->
		s = 1;
		do
		:: mdl[s] == 0 -> break
		:: else -> s++
		od;
		if
		:: mhas & BIT(s) ->
			assert(!(MRETAINED & BIT(s)));     /* no point within the retention references it */
			mhas = mhas & ~BIT(s)
		:: else
		fi;
		mdl[s] = NODL; s = 0 }
	od
}
#endif

/* checkpoint.Create: publish (seal, barrier, manifest), then the record */
proctype Admin()
{
	do
	:: atomic { ckph == 0 && !quiet && ready[aw] && !pend[aw] && NODIRTY(aw) && fph[aw] == 0 && !stall ->
		ckseg[0] = dseg[0]; ckseg[1] = dseg[1]; ckpseg[0] = dpseg[0]; ckpseg[1] = dpseg[1];
		ckage = 0; ckph = 1 }
	:: atomic { ckph == 1 && ckage <= MPR -> ckrec = 1; ckph = 2 }
	:: atomic { ckph == 1 && ckage > MPR -> ckph = 3 }     /* too slow: removed, failed */
	/* checkpoint.Delete (a persistent one; an ephemeral one just expires) */
	:: atomic { ckph == 2 && ckkind == PERSISTENT -> ckrec = 0; ckph = 3 }
	od
}

proctype Env()
{
	byte s;
	do
	/* a counter under-count (a bug elsewhere): the deletion check must catch it */
	:: atomic { faults > 0 && !quiet && ready[aw] ->
		if :: s = 1 :: s = 2 :: s = 3 :: s = 4 fi;
		if
		:: CH(aw,s) && CL(aw,s) > 0 -> CL(aw,s) = CL(aw,s) - 1; pend[aw] = 1; trig[aw] = 1; faults--
		:: else
		fi;
		s = 0 }
#ifdef STALLS
	/* the store refuses PUTs for a while: journal writes stall */
	:: atomic { stalls > 0 && !stall && !quiet -> stall = 1; stalls-- }
	:: atomic { stall -> stall = 0 }
#endif
	/* from here on: no writes, crashes, faults; no persistent checkpoint */
	:: atomic { !quiet && ckph != 1 && ckph != 2 && !stall ->
		quiet = 1; ops = 0; crashes = 0; zombies = 0; faults = 0; stalls = 0 }
	od
}

#define PTR_OK(p) ((p) == 0 || obj[p] == PRESENT)
#define INV ((!ready[aw] || (PTR_OK(CS(aw,0)) && PTR_OK(CS(aw,1)) && PTR_OK(CP(aw,0)) && PTR_OK(CP(aw,1)))) && \
	PTR_OK(dseg[0]) && PTR_OK(dseg[1]) && PTR_OK(dpseg[0]) && PTR_OK(dpseg[1]) && \
	DNEWV(0) >= ackv[0] && DNEWV(1) >= ackv[1] && \
	!(ckrec && (ckkind == PERSISTENT || ckage < CSPAN) && \
	  !(PTR_OK(ckseg[0]) && PTR_OK(ckseg[1]) && PTR_OK(ckpseg[0]) && PTR_OK(ckpseg[1]))) && \
	!(VLIVE && obj[vseg] != PRESENT) && MINV)

#ifndef LIVENESS
active proctype Monitor()
{
	assert(INV)
}
#endif

#ifdef LIVENESS
#define GOK(s) (obj[s] != PRESENT || CS(aw,0) == s || CS(aw,1) == s || CP(aw,0) == s || CP(aw,1) == s)
ltl live { [] (quiet -> <> (GOK(1) && GOK(2) && GOK(3) && GOK(4))) }
#endif

init
{
	byte k;
	atomic {
		obj[1] = PRESENT; FV(1,0) = 1; FV(1,1) = 1;
		gver[0] = 1; gver[1] = 1; ackv[0] = 1; ackv[1] = 1;
		dseg[0] = 1; dseg[1] = 1; dver[0] = 1; dver[1] = 1;
		dhas[1] = 1; dlive[1] = 2; everdur[1] = 1;
#ifdef EPHEMERAL_CREATE
		ckkind = EPHEMERAL;
#else
		ckkind = PERSISTENT;
#endif
#if defined(REPLICA_PIN_RACE) || defined(NOREPLICA)
		rrec = 0;
#endif
#ifdef MIRROR
		/* the mirror starts holding the initial state */
		mhas = BIT(1); mnewest = BIT(1); mret[0] = BIT(1);
		k = 1;
		do
		:: k <= NS -> mdl[k] = NODL; k++
		:: else -> break
		od;
		k = 0;
#ifndef MUTANT_MIRROR_NO_RECORD
		rrec = 1;       /* [MR] its reader-mirror record (mirror.HoldName) */
#endif
#endif
		kill(1); kill(0);
		jlast = 0; aw = 0; start(0); ready[0] = 1;
#ifdef STANDBY
		ep[0] = 1; jby[1] = 1;
		/* [H1] both standbys read the same lease record (ReadLeaseTag)
		   before the writer fell silent: the race */
		sbst[0] = 1; sbst[1] = 1; sbep[0] = 1; sbep[1] = 1;
#endif
		run Engine(0); run Engine(1); run Reclaimer(0); run Reclaimer(1);
		run Life(); run Clock(); run Env();
#ifndef NOADMIN
		run Admin();
#endif
#ifndef NOREPLICA
		run Replica();
#endif
#ifdef MIRROR
		run Mirror();
#endif
	}
}
