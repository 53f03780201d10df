"""HAMi's node locks, the whole protocol: the one home of the `hami.io/mutex.lock` annotation
and of a family's own lock (a bare time; its FamilyWire names it).

HAMi's device plugin finds the pod it must allocate for through the lock and releases it after
Allocate, so a bind takes it before posting its Binding. The modules, bottom up:

* `wire`: the value's format (HAMi v2.10's) and expiry;
* `rules`: when a bind may take someone else's lock (expiry, gone or finished holders,
  orphans of a scheduler killed mid-bind): a pure decision;
* `table`: `NodeLocks`, the only in-memory copy of each node's lock (its value, the Node's
  resourceVersion, whether this process wrote it), fed the Nodes by the cache and the answers
  of our own lock writes; the wait logic and the cache's counting both read it;
* `writes`: one lock write or release against the API server, retried on races;
* `locker`: `NodeLocker`, a bind's side: waiting in turn, taking, giving back.
"""
