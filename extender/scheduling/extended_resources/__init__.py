"""Extended resources backed by DRA (``DRAExtendedResource``): which resources a node leaves to
DRA (``needs``) and the scheduler-made claim that carries them (``claim``)."""
