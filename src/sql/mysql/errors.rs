//! MySQL/MariaDB's driver errors in the shared [`Failure`] kinds, by server error number.

use crate::sql::errors::Failure;
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

const ER_DBACCESS_DENIED_ERROR: u16 = 1044;
const ER_ACCESS_DENIED_ERROR: u16 = 1045;
const ER_BAD_DB_ERROR: u16 = 1049;
const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_CON_COUNT_ERROR: u16 = 1040;

pub fn classify_database(db: &dyn DatabaseError) -> Failure {
    match db
        .try_downcast_ref::<MySqlDatabaseError>()
        .map(|e| e.number())
    {
        Some(ER_NO_SUCH_TABLE) => Failure::NotFound,
        Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT) => Failure::Transient,
        Some(ER_ACCESS_DENIED_ERROR | ER_DBACCESS_DENIED_ERROR | ER_BAD_DB_ERROR) => {
            Failure::Refused
        }
        Some(ER_SERVER_SHUTDOWN | ER_CON_COUNT_ERROR) => Failure::Connection,
        _ => Failure::Other,
    }
}
/// The server's message with its error number, and what to do about an oversized packet.
pub fn describe(db: &dyn DatabaseError) -> String {
    match db.try_downcast_ref::<MySqlDatabaseError>() {
        Some(my) if my.number() == ER_NET_PACKET_TOO_LARGE => format!(
            "{} (the statement exceeded the server's max_allowed_packet; raise max_allowed_packet)",
            my.message()
        ),
        Some(my) => format!("{} (error {})", my.message(), my.number()),
        None => db.message().to_owned(),
    }
}
