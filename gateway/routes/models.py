"""GET /v1/models: the configured models, in the OpenAI list shape (`created`: when each was built)."""

from __future__ import annotations

from fastapi import APIRouter

from contracts.catalog import ServedModel
from contracts.errors import model_not_found
from contracts.schemas import ModelCard, ModelList
from gateway.deps import CatalogDep

router = APIRouter(prefix="/v1/models", tags=["models"])


def _card(model: ServedModel) -> ModelCard:
    return ModelCard(id=model.model_id, created=model.created, max_context_tokens=model.max_context_tokens)


@router.get("", response_model=ModelList)
async def list_models(catalog: CatalogDep) -> ModelList:
    return ModelList(data=[_card(model) for model in catalog])


@router.get("/{model_id}", response_model=ModelCard)
async def get_model(model_id: str, catalog: CatalogDep) -> ModelCard:
    model = catalog.get(model_id)
    if model is None:
        raise model_not_found(model_id, catalog.ids())
    return _card(model)
