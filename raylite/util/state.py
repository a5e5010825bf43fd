"""raylite.util.state: the state API under Ray's names (objects so far).

    from raylite.util.state import list_objects, summarize_objects
    for obj in list_objects():
        print(obj.object_id, obj.object_size, obj.location, obj.reference_type)

`list_objects` reports every object in the cluster with its size, its owner, where it is
(INLINE in its owner's memory, SHARED_MEMORY or SPILLED on a node) and which processes
hold references to it (the owner's own refs, refs held by pending tasks, borrowers,
objects that contain it).
"""

from raylite._state import ObjectState, format_objects, list_objects, summarize_objects

__all__ = ["ObjectState", "format_objects", "list_objects", "summarize_objects"]
