"""A module no task lives in: a row naming ``tests.tasks_backend.planted.fn`` as its activity type
must not make ``get_result`` import it (test_enqueue checks ``sys.modules``)."""


def fn():
    return "imported"
