-- Favorites per game per UTC day: added, removed and net.
SELECT dt AS day,
       game_id,
       SUM(CASE WHEN event_type = 'favorite.added' THEN 1 ELSE 0 END) AS added,
       SUM(CASE WHEN event_type = 'favorite.removed' THEN 1 ELSE 0 END) AS removed,
       SUM(CASE WHEN event_type = 'favorite.added' THEN 1 ELSE -1 END) AS net
FROM rally_events
WHERE event_type IN ('favorite.added', 'favorite.removed')
GROUP BY dt, game_id
ORDER BY dt, game_id
