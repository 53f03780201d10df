"""GPU preemption, the whole use case (hami serve --preemption, and hami explain's account).

kube-scheduler cannot do this itself: its preemption dry run runs only the in-tree filters,
which do not see card slices, so it never finds a victim (kubernetes #139270). The rules are
the pure hami.engine.preempt's; here, bottom up:

* `facts`: what is known of each placed pod beyond its cards (priority, start, labels, grace);
* `plan`: the decision, composed once (`Field.planning`), run paced by hami serve and at once by
  hami explain;
* `preempter`: carrying a plan out (evict, nominate, hold the freed cards) and the filter that
  asks for it (`PreemptingPlacement`);
* `lines`: hami explain's lines.
"""
