"""The consume service (``turnflow consume``): ``inbound.turns`` in, one engine turn per input,
replies and timers out after the save.

- ``service``: the input loop, composed of the parts below it;
- ``intake``, ``workers``, ``attempts``: the fetch loop and look-ahead, one worker per conversation
  with queued inputs, and each turn attempted until done (retries, fallback, the DLQ);
- ``slots``, ``dead_lettering``, ``commits``, ``ownership``, ``rebalance``: the fair turn slots,
  the way to the DLQ, commit watermarks, partition epochs and the hand-over on a rebalance;
- ``clients``, ``runtime``, ``tasks``: the clients opened at start and closed at shutdown, shared
  by the parts, and the side tasks;
- ``pipeline``: one input's load, turn, save and publish;
- ``parser``: a record into a turn input or a dead-letter reason;
- ``decisions``: what a failed turn becomes (retry, dead letter, abandon);
- ``session_queues``, ``watermarks``: per-conversation queues of inputs in offset order, and
  each partition's done offsets (what may be committed);
- ``fairness``, ``backpressure``, ``passing``, ``model_backoff``: which turn runs next, which
  records the loop holds, passes over (to read again) or stops reading, and when it waits;
- ``placement``, ``refused_words``, ``knowledge``, ``crash``: the smaller duties of the loop
  (records on the wrong partition, refused words, the knowledge index, the fault tests' crash
  points);
- ``supervisor``: ``turnflow consume --workers N``, several of these processes kept alive.

Only the composing packages (``cli``, ``devchat``, the inspector's console) import from here;
the scheduler, the relay and ``hosting`` (which routes records to stored agents) never do.
Importing this package imports none of its modules.
"""
