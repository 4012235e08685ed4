"""Scheduling algorithms: the registry behind ``po.schedule`` (original order, isl's scheduler as
a baseline), our Pluto-style and Feautrier schedulers on the level form, their fallback to the
original dimensions, the cache-footprint tile-size model and measured autotuning."""
