"""raylite.dag: .bind() records calls, .execute() runs them; inputs, sharing, actors, outputs."""

from __future__ import annotations

import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest

import raylite as ray
from raylite.dag import (
    ClassMethodNode,
    ClassNode,
    DAGNode,
    FunctionNode,
    InputAttributeNode,
    InputNode,
    MultiOutputNode,
)


@ray.remote
def inc(x):
    return x + 1


@ray.remote
def add(a, b):
    return a + b


@ray.remote
def describe(items):
    # Nodes nested in a list arrive as refs (like refs nested in .remote() args).
    return [type(item).__name__ for item in items], ray.get(list(items))


@ray.remote
def boom(x):
    raise ZeroDivisionError(f"no {x}")


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def bump(self, by=1):
        self.n += by
        return self.n

    def value(self):
        return self.n

    def scale(self, x):
        return self.n * x

    @ray.method(num_returns=2)
    def pair(self, x):
        return x, -x


def test_bind_runs_nothing_until_execute(cluster):
    counter = Counter.remote()
    node = counter.bump.bind(5)
    assert isinstance(node, ClassMethodNode)
    assert ray.get(counter.value.remote()) == 0
    assert ray.get(node.execute()) == 5
    assert ray.get(node.execute()) == 10  # a live handle keeps its state across executions


def test_function_chain_with_input(cluster):
    with InputNode() as inp:
        dag = add.bind(inc.bind(inp), 10)
    assert isinstance(dag, FunctionNode)
    assert ray.get(dag.execute(1)) == 12
    assert ray.get(dag.execute(5)) == 16
    assert dag.get_args()[1] == 10 and dag.get_kwargs() == {}


def test_shared_node_runs_once_per_execute(cluster):
    counter = Counter.remote()
    with InputNode() as inp:
        once = counter.bump.bind(inp)
        dag = add.bind(once, once)
    assert ray.get(dag.execute(3)) == 6
    assert ray.get(counter.value.remote()) == 3
    assert ray.get(dag.execute(3)) == 12
    assert ray.get(counter.value.remote()) == 6


def test_input_positional_keyword_and_indexing(cluster):
    with InputNode() as inp:
        assert isinstance(inp[0], InputAttributeNode) and isinstance(inp.x, InputAttributeNode)
        dag = MultiOutputNode([inc.bind(inp[0]), inc.bind(inp[1]), inc.bind(inp.x)])
    assert ray.get(dag.execute(1, 2, x=3)) == [2, 3, 4]
    with InputNode() as inp:
        by_key = add.bind(inp["a"], inp.b)
    assert ray.get(by_key.execute(a=1, b=2)) == 3
    with pytest.raises(KeyError, match="keyword argument 'a'"):
        by_key.execute(10, b=5)  # two inputs: "a" names a keyword argument, and none was given


def test_single_input_object_is_indexed_directly(cluster):
    with InputNode() as inp:
        from_list = add.bind(inp[0], inp[1])
        from_dict = add.bind(inp["m1"], inp["m2"])
        from_attr = add.bind(inp.m1, inp.m2)
        nested = inc.bind(inp[0]["deep"])
    assert ray.get(from_list.execute([1, 2])) == 3
    assert ray.get(from_dict.execute({"m1": 3, "m2": 4})) == 7
    assert ray.get(from_attr.execute(SimpleNamespace(m1=5, m2=6))) == 11
    assert ray.get(nested.execute([{"deep": 41}])) == 42


def test_class_node_one_actor_per_execute(cluster):
    with InputNode() as inp:
        actor = Counter.bind(100)
        assert isinstance(actor, ClassNode)
        first = actor.bump.bind(inp)
        second = actor.bump.bind(first)  # same actor, called after the first call
        dag = MultiOutputNode([first, second])
    assert ray.get(dag.execute(1)) == [101, 202]
    # Each execution starts a fresh actor from the ClassNode.
    assert ray.get(dag.execute(1)) == [101, 202]


@ray.remote
class Acc:
    def __init__(self, init_value):
        self.i = init_value

    def inc(self, x):
        self.i += x

    def get(self):
        return self.i


def test_calls_bound_on_an_actor_node_run_in_bind_order(cluster):
    """Ray's actor-DAG example: unused `inc` calls still change the actor before `get`."""
    a1 = Acc.bind(10)
    val = a1.get.bind()
    assert ray.get(val.execute()) == 10
    a2 = Acc.bind(10)
    a1.inc.bind(2)
    a1.inc.bind(4)
    a2.inc.bind(6)
    dag = add.bind(a1.get.bind(), a2.get.bind())
    assert ray.get(dag.execute()) == 32  # 10 + (10 + 2 + 4 + 6)
    assert ray.get(dag.execute()) == 32  # fresh actors each execution: the same answer
    assert ray.get(val.execute()) == 10  # a call bound before the incs does not run them


def test_actor_node_as_constructor_argument_keeps_its_calls(cluster):
    @ray.remote
    class Outer:
        def __init__(self, inner):
            self.inner = inner

        def inc(self, x):
            ray.get(self.inner.inc.remote(x))

        def get(self):
            return ray.get(self.inner.get.remote())

    outer = Outer.bind(Acc.bind(10))
    outer.inc.bind(2)
    assert ray.get(outer.get.bind().execute()) == 12


def test_class_node_execute_returns_a_handle(cluster):
    handle = Counter.bind(7).execute()
    assert isinstance(handle, ray.ActorHandle)
    assert ray.get(handle.bump.remote()) == 8


def test_class_node_actor_lives_until_the_result_is_read(cluster):
    # The ClassNode's actor handle is dropped when execute() returns; the call must still run.
    assert ray.get(Counter.bind(3).scale.bind(5).execute(), timeout=30) == 15


def test_handle_method_options_and_num_returns(cluster):
    counter = Counter.remote()
    refs = counter.pair.bind(4).execute()
    assert ray.get(refs) == [4, -4]
    node = Counter.bind().pair.options(num_returns=1).bind(2)
    assert ray.get(node.execute()) == (2, -2)
    split = inc.options(num_returns=1).bind(1)
    assert split.get_options()["num_returns"] == 1
    assert ray.get(split.execute()) == 2
    assert ray.get(inc.bind(1).options(name="renamed").execute()) == 2


def test_nested_nodes_become_refs_top_level_become_values(cluster):
    with InputNode() as inp:
        a = inc.bind(inp)
        dag = describe.bind([a, inc.bind(a)])
    kinds, values = ray.get(dag.execute(0))
    assert kinds == ["ObjectRef", "ObjectRef"]
    assert values == [1, 2]


def test_actor_handle_from_class_node_is_passed_to_tasks(cluster):
    @ray.remote
    def bump_twice(counter):
        ray.get(counter.bump.remote())
        return ray.get(counter.bump.remote())

    actor = Counter.bind(0)
    dag = MultiOutputNode([bump_twice.bind(actor), actor.value.bind()])
    out = dag.execute()
    assert ray.get(out[0]) == 2


def test_multi_output_node_returns_a_list(cluster):
    with InputNode() as inp:
        dag = MultiOutputNode([inc.bind(inp), add.bind(inp, inp)])
    refs = dag.execute(4)
    assert isinstance(refs, list) and len(refs) == 2
    assert ray.get(refs) == [5, 8]
    with pytest.raises(TypeError):
        MultiOutputNode(inc.bind(1))


def test_errors_keep_their_type(cluster):
    with InputNode() as inp:
        dag = inc.bind(boom.bind(inp))
    with pytest.raises(ZeroDivisionError, match="no 3"):
        ray.get(dag.execute(3))


def test_two_input_nodes_are_refused(cluster):
    with InputNode() as a, InputNode() as b:
        dag = add.bind(a, b)
    with pytest.raises(ValueError, match="one unique InputNode"):
        dag.execute(1)
    with pytest.raises(ValueError, match="takes no data"):
        InputNode(1)


def test_class_node_misuse(cluster):
    node = Counter.bind()
    with pytest.raises(AttributeError, match="already bound"):
        node.bind()
    with pytest.raises(TypeError, match="bind"):
        node.bump(1)
    with pytest.raises(AttributeError):
        node.no_such_method.bind().execute()


def test_nodes_do_not_pickle_and_cycles_are_caught(cluster):
    with pytest.raises(TypeError, match="cannot be serialized"):
        pickle.dumps(inc.bind(1))
    loop: list = []
    node = describe.bind(loop)
    loop.append(node)
    with pytest.raises(ValueError, match="cycle"):
        node.execute()


def test_deep_graph_needs_no_recursion(cluster):
    with InputNode() as inp:
        node: DAGNode = inp
        for _ in range(3 * sys.getrecursionlimit()):
            node = node[0]
    value: object = 42
    for _ in range(3 * sys.getrecursionlimit()):
        value = [value]
    assert node.execute(value) == 42
    seen = []
    node.traverse_and_apply(seen.append)
    assert len(seen) == 3 * sys.getrecursionlimit() + 1


def test_dag_loads_lazily():
    code = ("import sys, raylite; assert 'raylite.dag' not in sys.modules; "
            "assert raylite.dag.InputNode.__name__ == 'InputNode'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
