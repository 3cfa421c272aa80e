"""Typed payloads: an exact round trip, validation as part of the change, type-aware markers.

A payload with a type (a pydantic model instance, or a dict/list with ``payload_type=``) is
merged as its JSON form (``model_dump(mode="json", by_alias=True)``) and validated back. This
module makes that round trip exact, or refuses the type up front, and makes what validation
does part of the change that is reported and judged:

* :func:`check_round_trip` (called before any request by the agent, ``apply_change_request``,
  the tool handler and sessions): the payload's JSON form must validate back to an equal
  value. Secret and excluded fields are carried through (see the table); anything else that
  does not come back equal raises :class:`~agent_payload.errors.ConfigurationError` naming the
  field and why.
* :func:`validate_merged`: validates the merged JSON, restores the carried fields, then diffs
  the validated result against the input (``diff_payloads``): *those* changes become the
  report's changes (validators' side effects and union switches included), every one not
  already judged by the merge is judged by the guard, a change the type would silently drop or
  turn back into the old value goes back as a correction.
* :func:`type_strings`: every string value the type admits (``enum``, ``Literal``, ``const``
  anywhere in its schema), which the active DELETE marker must never be.
* :func:`clean_loc`: a validation error's location as a payload path (union branch tags such
  as ``pets[0].dog.meows`` removed).

What happens to each pydantic feature
-------------------------------------

====================================================  ==========================================
Feature                                               What happens
====================================================  ==========================================
``SecretStr`` / ``SecretBytes`` / ``Secret[T]``       The model sees ``"**********"``. The real
                                                      value is restored from the input after
                                                      validation and follows its element (issue
                                                      30): array shifts, a reorder by
                                                      replaceElements, a move by delete + insert
                                                      (the element matched by its exact JSON
                                                      form). A rewrite or a copy of an element
                                                      holding one, and the mask itself in new
                                                      content, are refused ("cannot be moved or
                                                      written by the model"). A request that
                                                      writes the field is refused: "a secret, set
                                                      it in code". A dict payload with a type
                                                      holding secrets is refused
                                                      (``ConfigurationError``: its JSON form
                                                      cannot hold the secret).
``Field(exclude=True)``                               Not shown, not in the JSON form; restored
                                                      from the input after validation, following
                                                      its element like a secret (also when its
                                                      object is replaced whole at the same key).
                                                      A request that names it is refused. Dict
                                                      payloads: refused as for secrets.
``field_serializer`` / ``model_serializer``           Kept when the JSON form validates back to an
                                                      equal value (a ``Decimal`` written as text);
                                                      otherwise ``ConfigurationError`` naming the
                                                      field.
split ``validation_alias`` / ``serialization_alias``  ``ConfigurationError`` naming the field and
                                                      both keys (the dump's key is not read back).
``AliasChoices``                                      Fine when the dumped key is one of the
                                                      choices (or the name, with
                                                      ``validate_by_name``); else
                                                      ``ConfigurationError``.
``validate_by_alias=False``                           Fine for fields without an alias;
                                                      ``ConfigurationError`` for an aliased field
                                                      (its dumped key is the alias).
``alias_generator`` (``to_camel``) / ``alias=``       Fine: dumped and validated by alias.
``@computed_field``                                   Shown (read-only); removed before
                                                      validation, so ``extra="forbid"`` models
                                                      work. An edit of it is a correction: "it is
                                                      computed; change what it derives from".
discriminated / plain unions                          A switch of branch is reported with what it
                                                      drops or adds (``pets[0].vaccinations``
                                                      deleted) and every guard judges that.
                                                      Errors name payload paths (no branch tags).
validators (``field_validator``, ``model_validator``)  Their side effects (a recomputed subtotal,
                                                      a normalised string) are changes in the
                                                      report, judged by the guards, rebuilt by
                                                      ``to_json_patch`` and undo.
defaults                                              DELETE of a field with a default that equals
                                                      its current value is a correction (nothing
                                                      would change); otherwise reported as the
                                                      update to the default.
``extra="ignore"``                                    A key the model writes that the type drops
                                                      is a correction naming it.
====================================================  ==========================================

Where each part lives: ``_inspect`` (the type inspected), ``_carry`` (secret and excluded
fields, original paths in the result), ``_validate`` (the round trip, ``validate_merged``).
"""

from agent_payload.typed._inspect import clean_loc, dump_json, type_strings, validation_errors
from agent_payload.typed._validate import check_round_trip, normalize, validate_merged

__all__ = [
    "check_round_trip",
    "clean_loc",
    "dump_json",
    "normalize",
    "type_strings",
    "validate_merged",
    "validation_errors",
]
