"""The one language table (execgym.languages) is what every user of languages reads."""

from __future__ import annotations

from execgym import toolchains
from execgym.judges.languages import SPECS
from execgym.languages import LANGUAGES
from execgym.server import languages as service
from execgym.tasks.models import LANGUAGE_ALIASES, normalize_language
from execgym.tasks.models import LANGUAGES as TASK_LANGUAGES


def test_task_languages_and_aliases_come_from_the_table() -> None:
    assert TASK_LANGUAGES == ("python", "c", "cpp", "java", "javascript", "rust", "bash", "go")
    assert set(TASK_LANGUAGES) == {n for n, row in LANGUAGES.items() if row.task_language}
    for name in TASK_LANGUAGES:
        for alias in LANGUAGES[name].aliases:
            assert normalize_language(alias.upper()) == name
    assert LANGUAGE_ALIASES["c++"] == "cpp"
    assert LANGUAGE_ALIASES["nodejs"] == "javascript"


def test_every_task_language_has_a_build_recipe_and_a_finder() -> None:
    assert set(SPECS) == set(TASK_LANGUAGES)
    assert set(toolchains._FINDERS) == set(TASK_LANGUAGES)
    for name in TASK_LANGUAGES:
        assert toolchains.missing_hint(name) == LANGUAGES[name].install_hint
        for key, value in LANGUAGES[name].env.items():
            assert SPECS[name].env[key] == value


def test_the_service_languages_are_the_rows_that_name_one() -> None:
    served = {s: row for row in LANGUAGES.values() for s in row.service_names}
    assert set(service.LANGUAGES) == set(served)
    assert set(service.LANGUAGES) == {
        "python", "pytest", "bash", "cpp", "nodejs", "typescript", "java", "rust", "go"
    }  # fmt: skip
    for name, language in service.LANGUAGES.items():
        row = served[name]
        assert (language.tools, language.install_hint) == (row.tools, row.install_hint)
        assert (language.max_processes, dict(language.env)) == (row.max_processes, row.env)
    assert service.LANGUAGES["nodejs"].tools == LANGUAGES["javascript"].tools
    assert set(service.LANGUAGES) <= set(service.SANDBOX_FUSION_LANGUAGES)
