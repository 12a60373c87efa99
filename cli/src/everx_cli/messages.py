"""The command line's own messages: English (the key) with European Portuguese and French.

French typography: a no-break space (U+00A0) before : ; ? ! and inside « ». Placeholders in braces
are filled by `i18n.t`; whole sentences only, so each language orders its words its own way.
"""

MESSAGES: dict[str, dict[str, str]] = {
    # The application and its options
    "Rent and sell GPU hours on EverXCloud from the terminal.": {
        "pt": "Alugue e venda horas de GPU na EverXCloud a partir do terminal.",
        "fr": "Louez et vendez des heures GPU sur EverXCloud depuis le terminal.",
    },
    "Your offers as a seller: list, post, reprice, withdraw.": {
        "pt": "As suas ofertas como vendedor: listar, publicar, mudar o preço, retirar.",
        "fr": "Vos offres de vendeur\u00a0: lister, publier, changer le prix, retirer.",
    },
    "Print the API's answer as JSON, for scripts.": {
        "pt": "Mostrar a resposta da API em JSON, para scripts.",
        "fr": "Afficher la réponse de l'API en JSON, pour les scripts.",
    },
    "Language of the messages: en, pt or fr.": {
        "pt": "Língua das mensagens: en, pt ou fr.",
        "fr": "Langue des messages\u00a0: en, pt ou fr.",
    },
    "Do not ask for confirmation.": {
        "pt": "Não pedir confirmação.",
        "fr": "Ne pas demander de confirmation.",
    },
    "How many to show (1 to 100).": {
        "pt": "Quantos mostrar (de 1 a 100).",
        "fr": "Combien en afficher (de 1 à 100).",
    },
    "Where the previous page ended.": {
        "pt": "Onde terminou a página anterior.",
        "fr": "Où la page précédente s'est arrêtée.",
    },
    "The GPU model, by its slug (h100-sxm).": {
        "pt": "O modelo de GPU, pelo seu identificador (h100-sxm).",
        "fr": "Le modèle de GPU, par son identifiant (h100-sxm).",
    },
    "How many GPUs on one server.": {
        "pt": "Quantas GPU num só servidor.",
        "fr": "Combien de GPU sur un même serveur.",
    },
    "How many hours; without it the rental runs until you stop it.": {
        "pt": "Quantas horas; sem esta opção, o aluguer continua até o parar.",
        "fr": "Combien d'heures\u00a0; sans cette option, la location dure jusqu'à ce que vous l'arrêtiez.",
    },
    "Only servers in this region (europe, north-america, asia-pacific).": {
        "pt": "Só servidores nesta região (europe, north-america, asia-pacific).",
        "fr": "Seulement les serveurs de cette région (europe, north-america, asia-pacific).",
    },
    "The offer's id (everx offer list).": {
        "pt": "O número da oferta (everx offer list).",
        "fr": "Le numéro de l'offre (everx offer list).",
    },
    "Your SSH public key file (the one ending in .pub).": {
        "pt": "O ficheiro da sua chave SSH pública (o que termina em .pub).",
        "fr": "Le fichier de votre clé SSH publique (celui qui se termine par .pub).",
    },
    "Or one of the SSH keys saved in your account, by its id.": {
        "pt": "Ou uma das chaves SSH guardadas na sua conta, pelo seu número.",
        "fr": "Ou l'une des clés SSH enregistrées dans votre compte, par son numéro.",
    },
    "The exchange's address (default: the saved one, or EVERX_URL).": {
        "pt": "O endereço da bolsa (por omissão: o guardado, ou EVERX_URL).",
        "fr": "L'adresse de la bourse (par défaut\u00a0: celle enregistrée, ou EVERX_URL).",
    },
    "Print the version and stop.": {
        "pt": "Mostrar a versão e terminar.",
        "fr": "Afficher la version et s'arrêter.",
    },
    # Commands
    "Check an API token and save it for the next commands.": {
        "pt": "Verificar um token de API e guardá-lo para os comandos seguintes.",
        "fr": "Vérifier un jeton d'API et l'enregistrer pour les commandes suivantes.",
    },
    "Forget the saved token (revoke it on the API tokens page).": {
        "pt": "Esquecer o token guardado (revogue-o na página de tokens de API).",
        "fr": "Oublier le jeton enregistré (révoquez-le sur la page des jetons d'API).",
    },
    "Who the token acts for, and what it may do.": {
        "pt": "Em nome de quem o token atua, e o que pode fazer.",
        "fr": "Pour qui le jeton agit, et ce qu'il peut faire.",
    },
    "The GPU models you can rent, with their memory and bandwidth.": {
        "pt": "Os modelos de GPU que pode alugar, com a sua memória e largura de banda.",
        "fr": "Les modèles de GPU que vous pouvez louer, avec leur mémoire et leur bande passante.",
    },
    "Every GPU model's market: best prices, last trade, GPUs on offer.": {
        "pt": "O mercado de cada modelo de GPU: melhores preços, último negócio, GPU em oferta.",
        "fr": "Le marché de chaque modèle de GPU\u00a0: meilleurs prix, dernière transaction, GPU proposés.",
    },
    "A GPU model's order book: the price levels of offers and bids.": {
        "pt": "O livro de ordens de um modelo de GPU: os níveis de preço das ofertas e licitações.",
        "fr": "Le carnet d'ordres d'un modèle de GPU\u00a0: les niveaux de prix des offres et des enchères.",
    },
    "What an order would cost now, at the best offer.": {
        "pt": "Quanto custaria uma ordem agora, à melhor oferta.",
        "fr": "Ce que coûterait un ordre maintenant, à la meilleure offre.",
    },
    "Buy GPU hours now at the best offer, up to your maximum price.": {
        "pt": "Comprar horas de GPU já, à melhor oferta, até ao seu preço máximo.",
        "fr": "Acheter des heures GPU maintenant à la meilleure offre, jusqu'à votre prix maximum.",
    },
    "Place a bid that rests in the book until filled, cancelled or expired.": {
        "pt": "Colocar uma licitação que fica no livro de ordens até ser executada, cancelada ou expirar.",
        "fr": (
            "Placer une enchère qui reste dans le carnet jusqu'à "
            "son exécution, son annulation ou son expiration."
        ),
    },
    "Your bids, newest first.": {
        "pt": "As suas licitações, das mais recentes para as mais antigas.",
        "fr": "Vos enchères, des plus récentes aux plus anciennes.",
    },
    "Cancel one of your open bids.": {
        "pt": "Cancelar uma das suas licitações em aberto.",
        "fr": "Annuler l'une de vos enchères ouvertes.",
    },
    "Your rentals, newest first.": {
        "pt": "Os seus alugueres, dos mais recentes para os mais antigos.",
        "fr": "Vos locations, des plus récentes aux plus anciennes.",
    },
    "One rental, with the ssh command that reaches it while it runs.": {
        "pt": "Um aluguer, com o comando ssh que lhe acede enquanto está em curso.",
        "fr": "Une location, avec la commande ssh qui y mène tant qu'elle est en cours.",
    },
    "Stop a rental now: its GPUs are released at once.": {
        "pt": "Parar um aluguer agora: as suas GPU são libertadas de imediato.",
        "fr": "Arrêter une location maintenant\u00a0: ses GPU sont libérés immédiatement.",
    },
    "Your wallet: balance, spending per hour, and how long it lasts.": {
        "pt": "A sua carteira: saldo, gasto por hora, e quanto tempo dura.",
        "fr": "Votre portefeuille\u00a0: solde, dépense par heure, et combien de temps il tient.",
    },
    "The movements of your wallet, newest first.": {
        "pt": "Os movimentos da sua carteira, dos mais recentes para os mais antigos.",
        "fr": "Les mouvements de votre portefeuille, des plus récents aux plus anciens.",
    },
    "Your seller's servers (a token with the sell scope).": {
        "pt": "Os servidores do seu vendedor (um token com o âmbito sell).",
        "fr": "Les serveurs de votre vendeur (un jeton avec la portée sell).",
    },
    "Your offers, newest first.": {
        "pt": "As suas ofertas, das mais recentes para as mais antigas.",
        "fr": "Vos offres, des plus récentes aux plus anciennes.",
    },
    "Offer GPUs of one of your servers at a price per GPU-hour.": {
        "pt": "Oferecer GPU de um dos seus servidores a um preço por hora de GPU.",
        "fr": "Proposer des GPU de l'un de vos serveurs à un prix par heure GPU.",
    },
    "Change the price of one of your offers.": {
        "pt": "Mudar o preço de uma das suas ofertas.",
        "fr": "Changer le prix de l'une de vos offres.",
    },
    "Take one of your offers out of the book.": {
        "pt": "Retirar uma das suas ofertas do livro de ordens.",
        "fr": "Retirer l'une de vos offres du carnet d'ordres.",
    },
    "Your seller's earnings: this month, in all, and what can be paid out.": {
        "pt": "Os ganhos do seu vendedor: este mês, no total, e o que pode ser pago.",
        "fr": "Les gains de votre vendeur\u00a0: ce mois-ci, au total, et ce qui peut être versé.",
    },
    # Arguments and options of the commands
    "How many price levels.": {
        "pt": "Quantos níveis de preço.",
        "fr": "Combien de niveaux de prix.",
    },
    "The most you pay per GPU-hour, in US dollars (2.90).": {
        "pt": "O máximo que paga por hora de GPU, em dólares americanos (2.90).",
        "fr": "Le maximum que vous payez par heure GPU, en dollars américains (2.90).",
    },
    "When the bid expires: 12h, 2d or a time (2026-12-24T18:00:00Z).": {
        "pt": "Quando a licitação expira: 12h, 2d ou uma hora (2026-12-24T18:00:00Z).",
        "fr": "Quand l'enchère expire\u00a0: 12h, 2d ou une date (2026-12-24T18:00:00Z).",
    },
    "Only the bids still open.": {
        "pt": "Só as licitações ainda em aberto.",
        "fr": "Seulement les enchères encore ouvertes.",
    },
    "The bid's id (everx orders).": {
        "pt": "O número da licitação (everx orders).",
        "fr": "Le numéro de l'enchère (everx orders).",
    },
    "Only live or only ended rentals.": {
        "pt": "Só os alugueres ativos, ou só os terminados.",
        "fr": "Seulement les locations actives, ou seulement les terminées.",
    },
    "The rental's id (everx rentals).": {
        "pt": "O número do aluguer (everx rentals).",
        "fr": "Le numéro de la location (everx rentals).",
    },
    "Print only the ssh command.": {
        "pt": "Mostrar só o comando ssh.",
        "fr": "Afficher seulement la commande ssh.",
    },
    "The server's id (everx servers).": {
        "pt": "O número do servidor (everx servers).",
        "fr": "Le numéro du serveur (everx servers).",
    },
    "How many of its GPUs to offer.": {
        "pt": "Quantas das suas GPU oferecer.",
        "fr": "Combien de ses GPU proposer.",
    },
    "Price per GPU-hour, in US dollars (2.49).": {
        "pt": "Preço por hora de GPU, em dólares americanos (2.49).",
        "fr": "Prix par heure GPU, en dollars américains (2.49).",
    },
    "The new price per GPU-hour, in US dollars.": {
        "pt": "O novo preço por hora de GPU, em dólares americanos.",
        "fr": "Le nouveau prix par heure GPU, en dollars américains.",
    },
    # Signing in
    "API token (made on the API tokens page of your account)": {
        "pt": "Token de API (criado na página de tokens de API da sua conta)",
        "fr": "Jeton d'API (créé sur la page des jetons d'API de votre compte)",
    },
    "Type the token, or give it on the standard input.": {
        "pt": "Escreva o token, ou dê-o na entrada padrão.",
        "fr": "Tapez le jeton, ou donnez-le sur l'entrée standard.",
    },
    "Token saved in {path}.": {
        "pt": "Token guardado em {path}.",
        "fr": "Jeton enregistré dans {path}.",
    },
    "Signed in to {url} as {email}.": {
        "pt": "Sessão iniciada em {url} como {email}.",
        "fr": "Connecté à {url} en tant que {email}.",
    },
    "The token was not saved.": {
        "pt": "O token não foi guardado.",
        "fr": "Le jeton n'a pas été enregistré.",
    },
    "EVERX_TOKEN is set: it wins over the saved token while it is set.": {
        "pt": "EVERX_TOKEN está definido: enquanto estiver, prevalece sobre o token guardado.",
        "fr": "EVERX_TOKEN est défini\u00a0: tant qu'il l'est, il l'emporte sur le jeton enregistré.",
    },
    "The saved token is forgotten. Revoke it on the API tokens page if it may have leaked.": {
        "pt": (
            "O token guardado foi esquecido. Revogue-o na página "
            "de tokens de API se puder ter sido divulgado."
        ),
        "fr": "Le jeton enregistré est oublié. Révoquez-le sur la page des jetons d'API s'il a pu fuiter.",
    },
    "No token was saved.": {
        "pt": "Não havia nenhum token guardado.",
        "fr": "Aucun jeton n'était enregistré.",
    },
    "Email": {"pt": "Email", "fr": "E-mail"},
    "Token": {"pt": "Token", "fr": "Jeton"},
    "Scopes": {"pt": "Âmbitos", "fr": "Portées"},
    "Seller": {"pt": "Vendedor", "fr": "Vendeur"},
    # Errors
    "Error: {detail}": {
        "pt": "Erro: {detail}",
        "fr": "Erreur\u00a0: {detail}",
    },
    "Run everx login with a valid token, or set EVERX_TOKEN.": {
        "pt": "Execute everx login com um token válido, ou defina EVERX_TOKEN.",
        "fr": "Lancez everx login avec un jeton valide, ou définissez EVERX_TOKEN.",
    },
    "Make a token with this scope on the API tokens page of your account.": {
        "pt": "Crie um token com este âmbito na página de tokens de API da sua conta.",
        "fr": "Créez un jeton avec cette portée sur la page des jetons d'API de votre compte.",
    },
    "Could not reach the exchange at {url}: {reason}": {
        "pt": "Não foi possível contactar a bolsa em {url}: {reason}",
        "fr": "Impossible de joindre la bourse à l'adresse {url}\u00a0: {reason}",
    },
    "You are not signed in: run everx login, or set EVERX_TOKEN.": {
        "pt": "Não iniciou sessão: execute everx login, ou defina EVERX_TOKEN.",
        "fr": "Vous n'êtes pas connecté\u00a0: lancez everx login, ou définissez EVERX_TOKEN.",
    },
    "Write a price like 2.90 (US dollars per GPU-hour).": {
        "pt": "Escreva um preço como 2.90 (dólares americanos por hora de GPU).",
        "fr": "Écrivez un prix comme 2.90 (dollars américains par heure GPU).",
    },
    "Write an expiry like 12h, 2d or 2026-12-24T18:00:00Z (a time with its zone).": {
        "pt": "Escreva uma expiração como 12h, 2d ou 2026-12-24T18:00:00Z (uma hora com o seu fuso).",
        "fr": "Écrivez une expiration comme 12h, 2d ou 2026-12-24T18:00:00Z (une date avec son fuseau).",
    },
    "Give your SSH public key with --ssh-key, or a saved key with --ssh-key-id.": {
        "pt": "Indique a sua chave SSH pública com --ssh-key, ou uma chave guardada com --ssh-key-id.",
        "fr": "Indiquez votre clé SSH publique avec --ssh-key, ou une clé enregistrée avec --ssh-key-id.",
    },
    "Cannot read the file {path}.": {
        "pt": "Não é possível ler o ficheiro {path}.",
        "fr": "Impossible de lire le fichier {path}.",
    },
    "{path} is a private key: never send it. Give the public key, the file ending in .pub.": {
        "pt": (
            "{path} é uma chave privada: nunca a envie. Indique "
            "a chave pública, o ficheiro que termina em .pub."
        ),
        "fr": (
            "{path} est une clé privée\u00a0: ne l'envoyez jamais. Indiquez "
            "la clé publique, le fichier qui se termine par .pub."
        ),
    },
    # Confirmations
    "[y/N]": {"pt": "[s/N]", "fr": "[o/N]"},
    "Nothing was done.": {
        "pt": "Nada foi feito.",
        "fr": "Rien n'a été fait.",
    },
    "Nothing was done: add --yes to confirm without a question.": {
        "pt": "Nada foi feito: acrescente --yes para confirmar sem pergunta.",
        "fr": "Rien n'a été fait\u00a0: ajoutez --yes pour confirmer sans question.",
    },
    "{label}: {value}": {
        "pt": "{label}: {value}",
        "fr": "{label}\u00a0: {value}",
    },
    "The first hour is charged at once. A started hour is not refunded.": {
        "pt": "A primeira hora é cobrada de imediato. Uma hora começada não é reembolsada.",
        "fr": "La première heure est facturée immédiatement. Une heure commencée n'est pas remboursée.",
    },
    "When it is filled, the first hour is charged at once. A started hour is not refunded.": {
        "pt": (
            "Quando for executada, a primeira hora é cobrada "
            "de imediato. Uma hora começada não é reembolsada."
        ),
        "fr": (
            "Une fois l'enchère exécutée, la première heure est facturée "
            "immédiatement. Une heure commencée n'est pas remboursée."
        ),
    },
    "Buy now at the best offer?": {
        "pt": "Comprar já à melhor oferta?",
        "fr": "Acheter maintenant à la meilleure offre\u00a0?",
    },
    "Place this bid?": {
        "pt": "Colocar esta licitação?",
        "fr": "Placer cette enchère\u00a0?",
    },
    "Stop rental {id} now? The hour already paid is not refunded.": {
        "pt": "Parar o aluguer {id} agora? A hora já paga não é reembolsada.",
        "fr": "Arrêter la location {id} maintenant\u00a0? L'heure déjà payée n'est pas remboursée.",
    },
    "Your container rental's token (Jupyter's), given only once.": {
        "pt": "O token do seu aluguer em contentor (o do Jupyter), dado uma só vez.",
        "fr": "Le jeton de votre location en conteneur (celui de Jupyter), donné une seule fois.",
    },
    "It is given only once: keep it where you keep your passwords. Later, sign in over SSH and read it in "
    "{path}.": {
        "pt": "É dado uma só vez: guarde-o onde guarda as suas palavras-passe. Mais tarde, inicie sessão por "
              "SSH e leia-o em {path}.",
        "fr": "Il n'est donné qu'une fois\u00a0: gardez-le là où vous gardez vos mots de passe. Plus tard, "
              "connectez-vous en SSH et lisez-le dans {path}.",
    },
    "Name the levels as container, shared or whole, separated by commas.": {
        "pt": "Indique os níveis como container, shared ou whole, separados por vírgulas.",
        "fr": "Indiquez les niveaux par container, shared ou whole, séparés par des virgules.",
    },
    # Orders and their results
    "GPU model": {"pt": "Modelo de GPU", "fr": "Modèle de GPU"},
    "GPUs": {"pt": "GPU", "fr": "GPU"},
    "Hours": {"pt": "Horas", "fr": "Heures"},
    "until you stop it": {"pt": "até o parar", "fr": "jusqu'à ce que vous l'arrêtiez"},
    "Region": {"pt": "Região", "fr": "Région"},
    "Your maximum price per GPU-hour": {
        "pt": "O seu preço máximo por hora de GPU",
        "fr": "Votre prix maximum par heure GPU",
    },
    "Price per GPU-hour": {"pt": "Preço por hora de GPU", "fr": "Prix par heure GPU"},
    "Per hour in US dollars": {
        "pt": "Por hora em dólares americanos",
        "fr": "Par heure en dollars américains",
    },
    "Per hour in your wallet's currency": {
        "pt": "Por hora na moeda da sua carteira",
        "fr": "Par heure dans la devise de votre portefeuille",
    },
    "Total in US dollars": {"pt": "Total em dólares americanos", "fr": "Total en dollars américains"},
    "Total in your wallet's currency": {
        "pt": "Total na moeda da sua carteira",
        "fr": "Total dans la devise de votre portefeuille",
    },
    "Best offer": {"pt": "Melhor oferta", "fr": "Meilleure offre"},
    "none right now": {"pt": "nenhuma de momento", "fr": "aucune pour l'instant"},
    "Expires": {"pt": "Expira", "fr": "Expire"},
    "Rental {id} is {state}.": {
        "pt": "O aluguer {id} está {state}.",
        "fr": "La location {id} est {state}.",
    },
    "Its ssh command: everx rental {id}": {
        "pt": "O seu comando ssh: everx rental {id}",
        "fr": "Sa commande ssh\u00a0: everx rental {id}",
    },
    "Your bid {id} rests in the book until it is filled, cancelled or expires.": {
        "pt": "A sua licitação {id} fica no livro de ordens até ser executada, cancelada ou expirar.",
        "fr": (
            "Votre enchère {id} reste dans le carnet jusqu'à "
            "son exécution, son annulation ou son expiration."
        ),
    },
    "No offer matched your order: nothing was bought.": {
        "pt": "Nenhuma oferta correspondeu à sua ordem: nada foi comprado.",
        "fr": "Aucune offre ne correspondait à votre ordre\u00a0: rien n'a été acheté.",
    },
    "Bid {id} is cancelled.": {
        "pt": "A licitação {id} foi cancelada.",
        "fr": "L'enchère {id} est annulée.",
    },
    # Tables
    "Id": {"pt": "N.º", "fr": "N°"},
    "Name": {"pt": "Nome", "fr": "Nom"},
    "Vendor": {"pt": "Fabricante", "fr": "Fabricant"},
    "Memory (GB)": {"pt": "Memória (GB)", "fr": "Mémoire (Go)"},
    "Bandwidth": {"pt": "Largura de banda", "fr": "Bande passante"},
    "Open": {"pt": "Aberto", "fr": "Ouvert"},
    "Best bid": {"pt": "Melhor licitação", "fr": "Meilleure enchère"},
    "Best ask": {"pt": "Melhor oferta", "fr": "Meilleure offre"},
    "Last trade": {"pt": "Último negócio", "fr": "Dernière transaction"},
    "GPUs on offer": {"pt": "GPU em oferta", "fr": "GPU proposés"},
    "Offers (asks)": {"pt": "Ofertas (venda)", "fr": "Offres (vente)"},
    "Bids": {"pt": "Licitações", "fr": "Enchères"},
    "Maximum price": {"pt": "Preço máximo", "fr": "Prix maximum"},
    "Type": {"pt": "Tipo", "fr": "Type"},
    "State": {"pt": "Estado", "fr": "État"},
    "Placed": {"pt": "Colocada", "fr": "Placée"},
    "Rental": {"pt": "Aluguer", "fr": "Location"},
    "Started": {"pt": "Início", "fr": "Début"},
    "Paid through": {"pt": "Pago até", "fr": "Payée jusqu'au"},
    "Ended": {"pt": "Fim", "fr": "Fin"},
    "End reason": {"pt": "Motivo do fim", "fr": "Motif de fin"},
    "Cost so far": {"pt": "Custo até agora", "fr": "Coût à ce jour"},
    "Connect with:": {"pt": "Ligue-se com:", "fr": "Connectez-vous avec\u00a0:"},
    "This rental has ended: it has no connection any more.": {
        "pt": "Este aluguer terminou: já não tem ligação.",
        "fr": "Cette location est terminée\u00a0: elle n'a plus de connexion.",
    },
    "The ssh command appears once the rental is running.": {
        "pt": "O comando ssh aparece quando o aluguer estiver em curso.",
        "fr": "La commande ssh apparaît dès que la location est en cours.",
    },
    "Rental {id} is stopped. It cost {cost} in all.": {
        "pt": "O aluguer {id} está parado. Custou {cost} no total.",
        "fr": "La location {id} est arrêtée. Elle a coûté {cost} au total.",
    },
    "Balance": {"pt": "Saldo", "fr": "Solde"},
    "Spending per hour": {"pt": "Gasto por hora", "fr": "Dépense par heure"},
    "Lasts (hours)": {"pt": "Dura (horas)", "fr": "Tient (heures)"},
    "no rental running": {"pt": "nenhum aluguer em curso", "fr": "aucune location en cours"},
    "Time": {"pt": "Hora", "fr": "Date"},
    "Description": {"pt": "Descrição", "fr": "Description"},
    "Amount": {"pt": "Montante", "fr": "Montant"},
    "Balance after": {"pt": "Saldo depois", "fr": "Solde après"},
    "Rented": {"pt": "Alugadas", "fr": "Louées"},
    "Status": {"pt": "Estado", "fr": "Statut"},
    "Host": {"pt": "Anfitrião", "fr": "Hôte"},
    "Offer": {"pt": "Oferta", "fr": "Offre"},
    "Server": {"pt": "Servidor", "fr": "Serveur"},
    "GPUs offered cheaper": {"pt": "GPU oferecidas mais baratas", "fr": "GPU proposés moins cher"},
    "Offer {id} is in the book.": {
        "pt": "A oferta {id} está no livro de ordens.",
        "fr": "L'offre {id} est dans le carnet d'ordres.",
    },
    "Offer {id} now asks {price} per GPU-hour.": {
        "pt": "A oferta {id} pede agora {price} por hora de GPU.",
        "fr": "L'offre {id} demande désormais {price} par heure GPU.",
    },
    "Offer {id} is withdrawn. Rentals already running go on.": {
        "pt": "A oferta {id} foi retirada. Os alugueres já em curso continuam.",
        "fr": "L'offre {id} est retirée. Les locations déjà en cours continuent.",
    },
    "This month, after the fee": {"pt": "Este mês, após a comissão", "fr": "Ce mois-ci, après commission"},
    "In all, after the fee": {"pt": "No total, após a comissão", "fr": "Au total, après commission"},
    "Smallest payout": {"pt": "Pagamento mínimo", "fr": "Versement minimum"},
    "Warning": {"pt": "Atenção", "fr": "Attention"},
    "your balance does not cover the first hour.": {
        "pt": "o seu saldo não cobre a primeira hora.",
        "fr": "votre solde ne couvre pas la première heure.",
    },
    "Available for payout": {"pt": "Disponível para pagamento", "fr": "Disponible pour versement"},
    "Pending payouts": {"pt": "Pagamentos pendentes", "fr": "Versements en attente"},
    "yes": {"pt": "sim", "fr": "oui"},
    "no": {"pt": "não", "fr": "non"},
    "Nothing to show.": {"pt": "Nada a mostrar.", "fr": "Rien à afficher."},
    "More on the next page: add --cursor {cursor}": {
        "pt": "Há mais na página seguinte: acrescente --cursor {cursor}",
        "fr": "La suite est sur la page suivante\u00a0: ajoutez --cursor {cursor}",
    },
    # Reliability (issue 16)
    "Only servers at least this reliable, a share from 0 to 1 (0.95); new servers never are.": {
        "pt": "Apenas servidores com pelo menos esta fiabilidade, uma fração de 0 a 1 (0.95); "
              "os servidores novos nunca contam.",
        "fr": "Uniquement des serveurs au moins aussi fiables, une part de 0 à 1 (0.95)\u00a0; "
              "les nouveaux serveurs ne le sont jamais.",
    },
    "Reliability of each offer's server": {
        "pt": "Fiabilidade do servidor de cada oferta",
        "fr": "Fiabilité du serveur de chaque offre",
    },
    "{gpus} GPUs ({reliability})": {
        "pt": "{gpus} GPU ({reliability})",
        "fr": "{gpus} GPU ({reliability})",
    },
    "and {count} more": {
        "pt": "e mais {count}",
        "fr": "et {count} autres",
    },
    "new": {
        "pt": "novo",
        "fr": "nouveau",
    },
    "Minimum reliability": {
        "pt": "Fiabilidade mínima",
        "fr": "Fiabilité minimale",
    },
    "Container template": {
        "pt": "Modelo de contentor",
        "fr": "Modèle de conteneur",
    },
    "Isolation levels": {
        "pt": "Níveis de isolamento",
        "fr": "Niveaux d'isolation",
    },
    "Only servers sold at these isolation levels, comma-separated: container, shared, whole (the market "
    "rules); default: all of them.": {
        "pt": "Apenas servidores vendidos nestes níveis de isolamento, separados por vírgulas: container, "
              "shared, whole (as regras do mercado); por omissão, todos.",
        "fr": "Uniquement des serveurs vendus à ces niveaux d'isolation, séparés par des virgules\u00a0: "
              "container, shared, whole (les règles du marché)\u00a0; par défaut, tous.",
    },
    "The container template a container server runs for you (everx templates); default: the "
    "exchange's default.": {
        "pt": "O modelo de contentor que um servidor de contentores executa para si (everx templates); "
              "por omissão: o predefinido da bolsa.",
        "fr": "Le modèle de conteneur qu'un serveur à conteneurs exécute pour vous (everx templates)\u00a0; "
              "par défaut\u00a0: celui de la bourse.",
    },
    "The container templates a rental sold as a container can run.": {
        "pt": "Os modelos de contentor que um aluguer vendido como contentor pode executar.",
        "fr": "Les modèles de conteneur qu'une location vendue comme conteneur peut exécuter.",
    },
    "Template": {
        "pt": "Modelo",
        "fr": "Modèle",
    },
    "Minimum driver": {
        "pt": "Controlador mínimo",
        "fr": "Pilote minimal",
    },
    "Disk (GB)": {
        "pt": "Disco (GB)",
        "fr": "Disque (Go)",
    },
    "Default": {
        "pt": "Predefinido",
        "fr": "Par défaut",
    },
}

# The codes the API sends for states and reasons, in words. Each kind agrees with its noun: a bid
# is a "licitação" / "enchère" (feminine), a rental an "aluguer" (masculine) / "location" (feminine).
VALUES: dict[str, dict[str, dict[str, str]]] = {
    "bid_state": {
        "open": {"en": "open", "pt": "aberta", "fr": "ouverte"},
        "filled": {"en": "filled", "pt": "executada", "fr": "exécutée"},
        "cancelled": {"en": "cancelled", "pt": "cancelada", "fr": "annulée"},
        "expired": {"en": "expired", "pt": "expirada", "fr": "expirée"},
    },
    "time_in_force": {
        "buy_now": {"en": "buy now", "pt": "comprar já", "fr": "achat immédiat"},
        "bid": {"en": "bid", "pt": "licitação", "fr": "enchère"},
    },
    "rental_state": {
        "starting": {"en": "starting", "pt": "a iniciar", "fr": "en démarrage"},
        "running": {"en": "running", "pt": "em curso", "fr": "en cours"},
        "ended": {"en": "ended", "pt": "terminado", "fr": "terminée"},
    },
    "end_reason": {
        "stopped_by_buyer": {"en": "stopped by the buyer", "pt": "parado pelo comprador",
                             "fr": "arrêtée par l'acheteur"},
        "hours_used": {"en": "all hours used", "pt": "todas as horas usadas",
                       "fr": "toutes les heures utilisées"},
        "payment_failed": {"en": "first hour could not be paid", "pt": "a primeira hora não pôde ser paga",
                           "fr": "la première heure n'a pas pu être payée"},
        "balance_exhausted": {"en": "balance exhausted", "pt": "saldo esgotado", "fr": "solde épuisé"},
        "server_failure": {"en": "server failure", "pt": "falha do servidor", "fr": "panne du serveur"},
        "not_delivered": {"en": "not delivered", "pt": "não entregue", "fr": "non livrée"},
        "operator": {"en": "ended by an operator", "pt": "terminado por um operador",
                     "fr": "terminée par un opérateur"},
    },
    "offer_state": {
        "active": {"en": "active", "pt": "ativa", "fr": "active"},
        "withdrawn": {"en": "withdrawn", "pt": "retirada", "fr": "retirée"},
    },
    "server_status": {
        "pending": {"en": "pending verification", "pt": "a aguardar verificação",
                    "fr": "en attente de vérification"},
        "active": {"en": "active", "pt": "ativo", "fr": "actif"},
        "retired": {"en": "retired", "pt": "retirado", "fr": "retiré"},
    },
}
