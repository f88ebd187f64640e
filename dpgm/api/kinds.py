"""The kind registry: one declaration per model kind, read by everything that dispatches on a kind.

A :class:`Kind` names the model class, its specification names, its methods (each
a :class:`Method`: the fit function and the schema of its options), the default
method, what identifies its structure in a checkpoint's fingerprint, how it is
saved and loaded, and the passes it supports after a fit. :func:`dpgm.fit`, the
option check, checkpoint fingerprints, specifications (:mod:`dpgm.spec`), the CLI,
the dashboard's reporter, :func:`dpgm.predict_proba` / :func:`dpgm.predict` and :func:`dpgm.score` read
:func:`kinds`; a new model kind is one more entry here, and the conformance suite
(``tests/conformance``) runs over every entry.

Examples
--------
>>> from dpgm.api.kinds import kind_named
>>> kind = kind_named("GaussianMixture")
>>> kind.default_method, sorted(kind.methods), sorted(kind.spec_names)
('em', ['em'], ['gaussian_mixture'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache, partial
from types import MappingProxyType
from typing import Any

from dpgm.algorithms.result import FitResult

__all__ = ["Kind", "Method", "SpecForm", "kind_named", "kind_of", "kinds", "spec_forms", "spec_names"]

# keyword arguments every fit function takes besides its options (dpgm.fit passes them): none, the client
# and the progress travel in the fit's data source (dpgm.stats.source.DataSource)
COMMON_ARGUMENTS: tuple[str, ...] = ()
# and those of an iterative method: the stopping rule and the per-iteration callback
STOPPING_ARGUMENTS = ("tol", "max_iter", "callback")


@dataclass(frozen=True)
class Method:
    """One way a kind is fitted: the fit function and the schema of its options.

    Attributes
    ----------
    function
        ``function(model, source[, method], *[, tol, max_iter, callback], **options)``; ``source`` is
        the fit's :class:`~dpgm.stats.source.DataSource` (data, schema, client, progress).
    options
        Option name -> constraint (:mod:`dpgm.api.checks`): exactly the options
        :func:`dpgm.fit` accepts for this method (``tol`` and ``max_iter`` included
        where they apply); each is a keyword parameter of ``function``.
    takes_method
        ``function`` takes the method's name as its third positional argument.
    stopping
        ``function`` takes ``tol``, ``max_iter`` and ``callback``.
    iterative
        The method iterates: the dashboard's ``/dpgm`` page follows its records.
    check_sizes
        ``check_sizes(model, source, restarts, chunk_rows)`` refuses, before any pass, hidden
        or latent variables whose tables or per-chunk arrays cannot be held
        (:class:`~dpgm.errors.TableTooLarge`), or None.
    standard_errors
        Its fits have asymptotic standard errors (:attr:`FitResult.standard_errors`; ``dpgm fit
        --standard-errors``).
    observed_information
        Its standard errors come from the observed information, formed when asked for, in one pass
        after the fit (:mod:`dpgm.api.observed_information`; EM fits).
    """

    function: Callable[..., FitResult]
    options: Mapping[str, Any]
    takes_method: bool = False
    stopping: bool = True
    iterative: bool = True
    check_sizes: Callable[[Any, Any, int, int], None] | None = None
    standard_errors: bool = False
    observed_information: bool = False

    def run(self, model: Any, source: Any, name: str, *, tol: float, max_iter: int, callback: Any,
            **options: Any) -> FitResult:
        """Call the fit function with what it takes of :func:`dpgm.fit`'s arguments (options already checked)."""
        head = (model, source, name) if self.takes_method else (model, source)
        extra = {"tol": tol, "max_iter": max_iter, "callback": callback} if self.stopping else {}
        result = self.function(*head, **extra, **options)
        if self.observed_information and "standard_errors" not in result.info:
            # formed when asked for, in a pass of its own over the same data (not a side-by-side pass)
            from dpgm.api.observed_information import observed_errors
            from dpgm.stats.source import DataSource

            plain = DataSource(source.data, source.schema, source.client, None)
            result.info["standard_errors"] = partial(observed_errors, kind_of(model).score, result.model, plain)
        return result


@dataclass(frozen=True)
class SpecForm:
    """One ``model:`` name of a specification (:mod:`dpgm.spec`) and how it builds its model.

    Attributes
    ----------
    keys
        The structure keys of the specification (every other key is an option of :func:`dpgm.fit`).
    build
        ``build(spec, states, continuous) -> (model, method or None)``: ``states`` are the data's
        categorical variables and their labels, ``continuous`` its continuous variables (None: not
        known); the method is the one the specification implies (``"em"`` with latent variables), None
        for the kind's default. Raises :class:`~dpgm.errors.SpecError` naming the key.
    model_options
        Keys that look like fit options but belong to the model (a GLM's ridge ``l2``): ``build`` reads
        them and they are not passed to the fit.
    """

    keys: tuple[str, ...]
    build: Callable[[dict, dict, list | None], tuple[Any, str | None]]
    model_options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Kind:
    """The declaration of one model kind.

    Attributes
    ----------
    name
        The class name (checkpoint fingerprints, saved models and messages use it).
    model_class
        The model class; an instance of it (or of a subclass) is of this kind.
    specs
        The values of a specification's ``model:`` key that build this kind, each
        mapped to its :class:`SpecForm` (structure keys and builder).
    methods
        Method name -> :class:`Method`.
    default_method
        The method of ``dpgm.fit(model, data)`` without ``method=``.
    structure
        ``structure(model)``: the JSON-able structure a checkpoint's fingerprint holds.
    predict_proba
        ``predict_proba(model, data, variable) -> (lazy values, labels[, dims])`` (dims: ``(row,
        variable)`` unless given), or None.
    predict
        ``predict(model, data, variable, name) -> lazy DataArray``, or None.
    score
        ``score(model, data) -> (lazy (row,) log-likelihoods, attrs)``, what :func:`dpgm.score` maps, or None.
    """

    name: str
    model_class: type
    specs: Mapping[str, SpecForm]
    methods: Mapping[str, Method]
    default_method: str
    structure: Callable[[Any], Any]
    predict_proba: Callable[..., tuple] | None = None
    predict: Callable[..., Any] | None = None
    score: Callable[..., tuple] | None = None

    @property
    def spec_names(self) -> dict[str, tuple[str, ...]]:
        """Each specification name of this kind -> its structure keys."""
        return {name: form.keys for name, form in self.specs.items()}

    @property
    def passes(self) -> frozenset[str]:
        """What can be done with a model of this kind: ``fit``, ``save``, ``load``, the predictions and ``score``."""
        optional = {"predict_proba": self.predict_proba, "predict": self.predict, "score": self.score}
        return frozenset({"fit", "save", "load", *(name for name, how in optional.items() if how is not None)})

    @property
    def em_methods(self) -> tuple[str, ...]:
        """The methods that run :func:`dpgm.algorithms.em.em` (they checkpoint and resume)."""
        return tuple(m for m, method in self.methods.items() if "resume" in method.options)

    def load(self, tables: dict, attrs: dict) -> Any:
        """Rebuild a saved model from its tables (what :func:`dpgm.load` does for this kind)."""
        return self.model_class._from_store(tables, attrs)

    def save(self, model: Any, path: Any, **kwargs: Any) -> None:
        """Write ``model`` to a Zarr group (:func:`dpgm.models.saving.save`)."""
        from dpgm.models.saving import save

        save(model, path, **kwargs)


@cache
def kinds() -> tuple[Kind, ...]:
    """Every registered model kind, in the order messages list them."""
    return tuple(_declarations())


def kind_of(model: Any) -> Kind:
    """The kind of a model instance (the most derived registered class it is an instance of).

    Raises
    ------
    ConfigTypeError
        ``model`` is of no registered kind, naming the kinds.
    """
    for cls in type(model).__mro__:
        for kind in kinds():
            if kind.model_class is cls:
                return kind
    from dpgm.errors import ConfigTypeError

    raise ConfigTypeError(f"cannot fit a {type(model).__name__}; expected one of {[k.name for k in kinds()]}")


def kind_named(name: str) -> Kind:
    """The kind whose class is called ``name`` (KeyError if none)."""
    for kind in kinds():
        if kind.name == name:
            return kind
    raise KeyError(name)


def spec_forms() -> MappingProxyType:
    """Every specification name -> its :class:`SpecForm`, in registry order."""
    return MappingProxyType({n: form for kind in kinds() for n, form in kind.specs.items()})


def spec_names() -> MappingProxyType:
    """Every specification name -> its structure keys, in registry order."""
    return MappingProxyType({n: form.keys for n, form in spec_forms().items()})


# ---------------------------------------------------------------- the declarations


def _scopes(model: Any) -> list:
    return [list(s) for s in model.scopes]


def _edges(model: Any) -> list:
    return [list(e) for e in model.edges]


def _declarations() -> list[Kind]:
    """The ten model kinds (the latent class model is a Bayesian network: its own specification name)."""
    import os

    from fsspec.mapping import FSMap

    from dpgm.api.bayesian import (
        bayesian_network_from_spec,
        fit_bayesian_network,
        fit_bayesian_network_em,
        latent_class_from_spec,
    )
    from dpgm.api.checks import (
        Anything,
        InstanceOf,
        Interval,
        OneOf,
        RandomState,
        component_sizes,
        hidden_state_sizes,
        latent_sizes,
    )
    from dpgm.api.gaussian import (
        fit_gaussian,
        fit_linear_gaussian,
        gaussian_graphical_from_spec,
        linear_gaussian_from_spec,
    )
    from dpgm.api.glm import fit_glm, glm_from_spec
    from dpgm.api.glm_predict import glm_prediction, glm_probabilities
    from dpgm.api.hmm import fit_hmm, hmm_from_spec
    from dpgm.api.hmm_decode import state_paths, state_posteriors
    from dpgm.api.hybrid import fit_hybrid, hybrid_network_from_spec
    from dpgm.api.hybrid_em import fit_hybrid_em
    from dpgm.api.log_linear import fit_log_linear, log_linear_from_spec
    from dpgm.api.markov import fit_markov_network, markov_network_from_spec
    from dpgm.api.mixture import (
        component_posteriors,
        fit_gaussian_mixture,
        gaussian_mixture_from_spec,
    )
    from dpgm.api.predict import discrete_posteriors
    from dpgm.api.score_kinds import (
        discrete_scores,
        gaussian_scores,
        glm_scores,
        hybrid_scores,
        linear_gaussian_scores,
        mixture_scores,
        sequence_scores,
    )
    from dpgm.api.undirected_em import fit_undirected_em
    from dpgm.models.bayesian_network import BayesianNetwork
    from dpgm.models.gaussian import GaussianGraphicalModel
    from dpgm.models.glm import GLMConditional
    from dpgm.models.hmm import HiddenMarkovModel
    from dpgm.models.hybrid import HybridNetwork
    from dpgm.models.linear_gaussian import LinearGaussianNetwork
    from dpgm.models.log_linear import LogLinearModel
    from dpgm.models.markov import MarkovNetwork
    from dpgm.models.mixture import GaussianMixture

    stop = {"tol": Interval(float, 0.0), "max_iter": Interval(int, 1)}
    folder = InstanceOf(str, os.PathLike, FSMap, type(None),
                        description="a folder path, an fsspec URL or fsspec.get_mapper(url, ...), or None")
    flag = InstanceOf(bool, description="True or False")
    em = stop | {"n_init": Interval(int, 1), "random_state": RandomState(), "init": OneOf(None, "random", "model"),
                 "checkpoint": folder, "resume": folder, "persist": flag,
                 "accelerate": OneOf(None, "squarem"), "incremental": flag, "prune_restarts": flag}
    goodness = {"goodness_of_fit": flag}
    missing = {"missing": OneOf("refuse", "listwise")}
    zeros = {"structural_zeros": Anything("a boolean DataArray of cells fixed at zero, or None")}
    prior = {"prior": OneOf(None, "BDeu", "K2", "dirichlet"),
             "equivalent_sample_size": Interval(float, 0.0, low_open=True),
             "pseudo_counts": InstanceOf(dict, type(None),
                                         description="a mapping variable -> table of pseudo-counts, or None")}
    weights = {"lbfgs": stop | zeros | goodness | {"l1": Interval(float, 0.0), "l2": Interval(float, 0.0)},
               "newton": stop | zeros | goodness | {"l2": Interval(float, 0.0)},
               "gis": stop | zeros | goodness}

    def undirected_em(m_step: str) -> Method:
        return Method(fit_undirected_em, em | zeros | {"m_step": OneOf(None, m_step), "inner_iter": Interval(int, 1)})

    observed = {"standard_errors": True, "observed_information": True}

    def table(function, options, **how) -> Method:
        return Method(function, options, takes_method=True, **how)

    bayesian = {"mle": Method(fit_bayesian_network, prior | goodness, takes_method=True, stopping=False,
                              iterative=False, standard_errors=True),
                "bayes": Method(fit_bayesian_network, prior | goodness, takes_method=True, stopping=False,
                                iterative=False, standard_errors=True),
                "em": Method(fit_bayesian_network_em, em | prior, check_sizes=latent_sizes, **observed)}
    gaussian_moments = {"closed_form": table(fit_gaussian, missing, iterative=False, standard_errors=True),
                        "ipf": table(fit_gaussian, stop | missing, standard_errors=True),
                        "glasso": table(fit_gaussian, stop | missing | {"alpha": Interval(float, 0.0)})}
    hybrid_em = {k: v for k, v in em.items() if k != "incremental"}
    mixture_init = Anything("None, 'k-means++', 'random', 'model' or a dict of weights, means and covariances or "
                            "precisions")
    return [
        Kind("BayesianNetwork", BayesianNetwork,
             {"bayesian_network": SpecForm(("model", "method", "edges", "network", "variables", "latent"),
                                           bayesian_network_from_spec),
              "latent_class": SpecForm(("model", "method", "n_classes", "observed", "variable"),
                                       latent_class_from_spec)},
             bayesian, "mle", _edges, predict_proba=discrete_posteriors, score=discrete_scores),
        Kind("MarkovNetwork", MarkovNetwork, {"markov_network": SpecForm(("model", "method", "cliques"),
                                                                      markov_network_from_spec)},
             {"ipf": table(fit_markov_network, stop | zeros | goodness | {"loglik_tol": Interval(float, 0.0)},
                           standard_errors=True),
              "closed_form": table(fit_markov_network, goodness, iterative=False, standard_errors=True),
              **{m: table(fit_markov_network, o, standard_errors=True) for m, o in weights.items()},
              "em": replace(undirected_em("ipf"), **observed)},
             "ipf", _scopes, predict_proba=discrete_posteriors, score=discrete_scores),
        Kind("LogLinearModel", LogLinearModel, {"log_linear": SpecForm(("model", "method", "margins"),
                                                                   log_linear_from_spec)},
             {**{m: table(fit_log_linear, o, standard_errors=True) for m, o in weights.items()},
              "em": replace(undirected_em("gis"), **observed)},
             "lbfgs", _scopes, predict_proba=discrete_posteriors, score=discrete_scores),
        Kind("HiddenMarkovModel", HiddenMarkovModel,
             {"hmm": SpecForm(("model", "method", "n_states", "symbols", "variable", "emissions", "hidden"),
                              hmm_from_spec)},
             {"em": Method(fit_hmm, em | {"reg_covar": Interval(float, 0.0),
                                         "sequence": InstanceOf(str, type(None), description="the name of the "
                                                                "sequence-id variable (the long layout), or None")},
                           check_sizes=hidden_state_sizes,
                           **observed)}, "em",
             lambda m: ({"hidden": m.hidden, "variable": m.variable, "n_states": m.n_states} if m.is_categorical
                        else {"hidden": m.hidden, "n_states": m.n_states, "emissions": [f.spec() for f in m.emissions]}),
             predict_proba=state_posteriors, predict=state_paths, score=sequence_scores),
        Kind("GaussianGraphicalModel", GaussianGraphicalModel,
             {"gaussian_graphical": SpecForm(("model", "method", "edges", "cliques", "variables"),
                                             gaussian_graphical_from_spec)},
             gaussian_moments, "ipf",
             lambda m: {"variables": list(m.variables), "adjacency": m.adjacency.astype(int).tolist()},
             score=gaussian_scores),
        Kind("LinearGaussianNetwork", LinearGaussianNetwork,
             {"linear_gaussian": SpecForm(("model", "method", "edges", "variables"), linear_gaussian_from_spec)},
             {"mle": table(fit_linear_gaussian, missing, iterative=False, standard_errors=True)}, "mle", _edges,
             score=linear_gaussian_scores),
        Kind("GaussianMixture", GaussianMixture,
             {"gaussian_mixture": SpecForm(("model", "method", "n_components", "variables", "covariance_type"),
                                           gaussian_mixture_from_spec)},
             {"em": Method(fit_gaussian_mixture, em | {"init": mixture_init, "reg_covar": Interval(float, 0.0)},
                           check_sizes=component_sizes, **observed)},
             "em", lambda m: {"n_components": m.n_components, "covariance_type": m.covariance_type},
             predict_proba=component_posteriors, score=mixture_scores),
        Kind("GLMConditional", GLMConditional,
             {"glm": SpecForm(("model", "method", "child", "parents", "family"), glm_from_spec, ("l2",))},
             {"irls": table(fit_glm, stop | missing, standard_errors=True)}, "irls",
             lambda m: {"child": m.child, "parents": list(m.parents), "family": m.family, "l2": m.l2},
             predict_proba=glm_probabilities, predict=glm_prediction, score=glm_scores),
        Kind("HybridNetwork", HybridNetwork,
             {"hybrid_network": SpecForm(("model", "method", "edges", "families", "variables", "latent"),
                                         hybrid_network_from_spec, ("l2",))},
             {"mle": table(fit_hybrid, stop | missing, standard_errors=True),
              "em": Method(fit_hybrid_em, hybrid_em, check_sizes=latent_sizes, **observed)}, "mle",
             lambda m: {"edges": _edges(m), "families": m.families, "l2": m.l2},
             predict_proba=glm_probabilities, predict=glm_prediction, score=hybrid_scores),
    ]
