# One image for the web process, the Celery worker and Celery beat.
FROM node:20-bookworm-slim AS assets
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 DEBUG=0
WORKDIR /app
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
COPY --from=assets /src/frontend/node_modules ./frontend/node_modules
# collectstatic needs a key and hosts to import settings; they are not used for anything else.
RUN SECRET_KEY=collectstatic-only ALLOWED_HOSTS=localhost python manage.py collectstatic --noinput
RUN useradd --system --uid 999 --home /app topoweb && chown -R topoweb /app
USER topoweb
EXPOSE 8000
# topoweb/config/gunicorn.py: bind, workers (WEB_CONCURRENCY) and metrics summed over them.
CMD ["gunicorn", "-c", "python:topoweb.config.gunicorn", "topoweb.config.wsgi:application"]
