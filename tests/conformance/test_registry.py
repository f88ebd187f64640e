"""The registry's declarations against the code they name: options, fit functions, specifications.

Parametrised over :func:`dpgm.api.kinds.kinds`, so a newly registered kind or method
is checked at once. The oracles are the fit functions' own signatures (what Python
would accept) and dpgm's public entry points (``dpgm.fit``, ``dpgm.spec.build_model``):
no pass over the data is needed to refuse an option.
"""

from __future__ import annotations

import inspect
import warnings

import pytest

import dpgm
from dpgm.api.kinds import COMMON_ARGUMENTS, STOPPING_ARGUMENTS, kind_of, kinds, spec_names
from dpgm.errors import ConfigError
from dpgm.spec import SpecError, build_model

from .builders import CASE_IDS, CASES, case_named

PAIRS = [(kind, method) for kind in kinds() for method in kind.methods]
PAIR_IDS = [f"{kind.name}-{method}" for kind, method in PAIRS]
EVERY_OPTION = sorted({name for kind, method in PAIRS for name in kind.methods[method].options})
# the options dpgm's EM loop implements for every family (dpgm.algorithms.em.em)
EM_LOOP_OPTIONS = {"accelerate": "squarem", "incremental": True, "prune_restarts": True}


def _case_of(kind) -> object:
    return next(case for case in CASES if kind_of(case.model()) is kind)


def test_every_specification_name_has_a_case_and_every_kind_one_at_least():
    assert sorted(spec_names()) == sorted(CASE_IDS)
    assert len(CASE_IDS) == 10  # the ten model kinds; a latent class model is a Bayesian network
    assert {kind_of(case.model()).name for case in CASES} == {kind.name for kind in kinds()}
    for case in CASES:
        assert case.spec_name in kind_of(case.model()).spec_names


@pytest.mark.parametrize(("kind", "method"), PAIRS, ids=PAIR_IDS)
def test_declared_options_are_keyword_parameters_of_the_fit_function(kind, method):
    """The check that would have caught hybrid EM's ``accelerate``: every option the schema lets through is a
    keyword the fit function takes (no ``**kwargs`` hiding a mismatch), and the stopping rule is taken where the
    method is declared to take it."""
    declared = kind.methods[method]
    parameters = inspect.signature(declared.function).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    keywords = {name for name, p in parameters.items()
                if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    needed = set(COMMON_ARGUMENTS) | (set(STOPPING_ARGUMENTS) if declared.stopping else set())
    assert needed <= keywords, sorted(needed - keywords)
    options = set(declared.options) - ({"tol", "max_iter"} if declared.stopping else set())
    assert options <= keywords, f"declared but not taken by {declared.function.__name__}: {sorted(options - keywords)}"
    if not declared.stopping:
        assert not {"tol", "max_iter"} & set(declared.options)
    assert kind.default_method in kind.methods


@pytest.mark.parametrize(("kind", "method"), PAIRS, ids=PAIR_IDS)
def test_undeclared_options_are_a_config_error_naming_them(kind, method):
    """Every option of another (kind, method) and a made-up one: refused by ``dpgm.fit`` before any pass, naming
    it (CLI exit 78)."""
    case = _case_of(kind)
    data = case.data()
    declared = set(kind.methods[method].options)
    for name in [n for n in EVERY_OPTION if n not in declared and n not in ("tol", "max_iter")] + ["no_such_option"]:
        with pytest.raises(ConfigError, match=name):
            dpgm.fit(case.model(), data, method=method, **{name: None})
    with pytest.raises(ConfigError, match="no_such_method"):
        dpgm.fit(case.model(), data, method="no_such_method")


EM_PAIRS = [(kind, method) for kind, method in PAIRS if method in kind.em_methods]


def _em_case(kind, method):
    """The kind's case fitted by ``method`` if there is one (a latent class model for a Bayesian network's EM),
    else its first case (EM on complete data)."""
    return next((c for c in CASES if kind_of(c.model()) is kind and c.method == method), None) or _case_of(kind)


@pytest.mark.parametrize(("kind", "method"), EM_PAIRS, ids=[f"{k.name}-{m}" for k, m in EM_PAIRS])
@pytest.mark.parametrize("option", sorted(EM_LOOP_OPTIONS))
def test_em_loop_options_run_where_declared_and_are_refused_elsewhere(kind, method, option):
    """``accelerate``, ``incremental`` and ``prune_restarts`` reach the EM loop of every EM method that declares
    them (a fit of a few iterations runs; hybrid networks' ``accelerate`` and ``prune_restarts`` were once a
    TypeError from the fit function), and are a ConfigError naming them where not declared (hybrid networks'
    ``incremental``)."""
    case = _em_case(kind, method)
    model, data = case.model(), case.data()
    options = {k: v for k, v in case.options.items() if k in kind.methods[method].options}
    options |= {"method": method, option: EM_LOOP_OPTIONS[option], "max_iter": 4, "n_init": 2}
    if option not in kind.methods[method].options:
        with pytest.raises(ConfigError, match=option):
            dpgm.fit(model, data, **options)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(model, data, **options)
    assert result.n_iter >= 1


@pytest.mark.parametrize(("kind", "method"), EM_PAIRS, ids=[f"{k.name}-{m}" for k, m in EM_PAIRS])
def test_each_em_method_hands_the_loop_a_family_declared_on_em_family(kind, method, monkeypatch):
    """The family an EM method gives :func:`dpgm.algorithms.em.em` (recorded on its way in during a real fit) is
    a subclass of ``EMFamily`` that implements the E step, the M step and the vector, and every public method or
    attribute it defines is declared on ``EMFamily``: one the loop cannot know of is a defect."""
    import dpgm.algorithms.em as loop
    from dpgm.algorithms.em import EMFamily

    families, run = [], loop.em

    def recording(family, starts, **options):
        families.append(family)
        return run(family, starts, **options)

    monkeypatch.setattr(loop, "em", recording)
    case = _em_case(kind, method)
    options = {k: v for k, v in case.options.items() if k in kind.methods[method].options}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        result = dpgm.fit(case.model(), case.data(), **(options | {"method": method, "max_iter": 2}))
    assert result.n_iter == 2 and len(families) == 1
    family = type(families[0])
    assert issubclass(family, EMFamily) and family is not EMFamily
    for required in ("estep", "mstep", "vector"):  # EMFamily's raise NotImplementedError
        assert getattr(family, required) is not getattr(EMFamily, required), f"{family.__name__}.{required}"
    declared = {name for name in dir(EMFamily) if not name.startswith("_")}
    own = {name for cls in family.__mro__[:family.__mro__.index(EMFamily)] for name in vars(cls)
           if not name.startswith("_")}
    assert own <= declared, f"{family.__name__} defines {sorted(own - declared)}, not declared on EMFamily"


def test_the_loop_reads_of_a_family_only_what_em_family_declares():
    """Every ``family.<name>`` the EM loop's source reads is declared on ``EMFamily`` (no ``getattr`` with a
    default standing in for a declaration)."""
    import ast
    import inspect

    import dpgm.algorithms.em as loop
    from dpgm.algorithms.em import EMFamily

    tree = ast.parse(inspect.getsource(loop))
    read = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "family"}
    assert {"estep", "mstep", "vector", "incremental_full_first_pass"} <= read
    assert read <= set(dir(EMFamily)), sorted(read - set(dir(EMFamily)))
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and isinstance(node.args[0], ast.Name)
                and node.args[0].id == "family"]


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_a_specification_whose_model_is_not_a_name_is_a_spec_error(spec_name):
    """``model: [glm]`` (a list) once failed with ``TypeError: unhashable type``; a SpecError is exit 78."""
    spec = case_named(spec_name).spec
    with pytest.raises(SpecError, match="'model' must be the name of a model kind"):
        build_model({**spec, "model": [spec_name]})
    with pytest.raises(SpecError, match="unknown model kind"):
        build_model({**spec, "model": f"{spec_name}_typo"})


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_a_specification_builds_the_kind_and_method_the_registry_declares(spec_name):
    """Each case's specification builds a model of the kind that lists its name, with the case's method and
    options, and a misplaced structure key of another kind is refused naming it."""
    case = case_named(spec_name)
    data = case.data()
    schema = dpgm.Schema.from_dataset(data)
    continuous = [v for v in data.data_vars if v not in schema.states]
    model, method, options = build_model(case.spec, schema.states, continuous=continuous)
    kind = kind_of(model)
    assert spec_name in kind.spec_names
    assert (method or kind.default_method) == (case.method or kind.default_method)
    assert options == {k: v for k, v in case.options.items() if k != "method"}
    other = next(n for n in spec_names() if n not in kind.spec_names)
    foreign = next(k for k in spec_names()[other] if all(k not in keys for keys in kind.spec_names.values()))
    with pytest.raises(SpecError, match=foreign):
        build_model({**case.spec, foreign: ["x"]}, schema.states, continuous=continuous)


@pytest.mark.parametrize("kind", kinds(), ids=[k.name for k in kinds()])
def test_each_kind_builds_its_specifications_in_its_own_module(kind):
    """One home per kind: the builder of each of its specification names is defined in a module that holds one
    of the kind's fit functions, and ``dpgm.spec`` switches on no kind (it reads the registry)."""
    homes = {method.function.__module__ for method in kind.methods.values()}
    for name, form in kind.specs.items():
        assert form.build.__module__ in homes, (name, form.build.__module__, homes)
    source = inspect.getsource(__import__("dpgm.spec", fromlist=["_build"]))
    assert not [n for n in spec_names() if f'"{n}"' in source.split('"""', 2)[2]], "dpgm.spec names a kind"


@pytest.mark.parametrize("kind", kinds(), ids=[k.name for k in kinds()])
def test_the_registry_declares_what_each_kind_can_do(kind):
    """Fingerprints are JSON-able for every kind; the passes a kind declares are those its entry points take."""
    import json

    case = _case_of(kind)
    model = case.model()
    json.dumps(kind.structure(model))
    assert {"fit", "save", "load"} <= kind.passes
    assert ("predict_proba" in kind.passes) == (kind.predict_proba is not None)
    if kind.predict is not None:
        assert "predict" in kind.passes


@pytest.mark.parametrize("spec_name", CASE_IDS)
def test_predictions_are_offered_exactly_where_the_registry_declares_them(spec_name):
    """``dpgm.predict`` and ``dpgm.predict_proba`` of a fitted model: a TypeError naming the kinds that have them
    where the kind declares none; otherwise one row of values per data row (the variable: the case's, or the
    latent one)."""
    case = case_named(spec_name)
    data = case.data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
        fitted = dpgm.fit(case.model(), data, **case.options).model
    kind = kind_of(fitted)
    variable = {"latent_class": "class", "gaussian_mixture": "component", "glm": "y", "hybrid_network": "x",
                "hmm": "state"}.get(spec_name, case.variable)
    if kind.predict is None:
        with pytest.raises(TypeError, match="predict needs"):
            dpgm.predict(fitted, data, variable)
    if kind.predict_proba is None:
        with pytest.raises(TypeError, match="predict_proba needs"):
            dpgm.predict_proba(fitted, data, variable)
        return
    if spec_name in ("glm", "hybrid_network"):  # a gaussian node: a mean, no state probabilities
        assert dpgm.predict(fitted, data, variable).shape == (data.sizes["row"],)
        return
    if spec_name == "hmm":  # every step of every sequence: its state on the Viterbi path, its posteriors
        steps = (data.sizes["row"], data.sizes["time"])
        assert dpgm.predict(fitted, data).shape == steps
        assert dpgm.predict_proba(fitted, data, variable).shape == (*steps, fitted.n_states)
        return
    assert dpgm.predict_proba(fitted, data, variable).shape[0] == data.sizes["row"]


def test_the_models_layer_knows_exactly_the_registered_kinds():
    """Each model module registers its own class (``@model_kind``), which is how ``dpgm.load`` and ``dpgm info``
    find it: the models layer's kinds are exactly the registry's model classes, and each describes itself."""
    from dpgm.models.store import model_kinds

    assert set(model_kinds().values()) == {kind.model_class for kind in kinds()}
    for case in CASES:
        model = case.model()
        described = model._describe()
        assert isinstance(described, tuple) and len(described) == 3, case.spec_name
