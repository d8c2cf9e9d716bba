"""One pod's decisions (filter, prioritize, bind, preempt) on top of the state and the allocator."""
